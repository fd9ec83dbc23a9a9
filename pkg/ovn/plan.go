package ovn

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Plan is the difference between the desired rows of some keys and the rows
// ovn-egress owns for those keys in NB (read from the client cache).
type Plan struct {
	Keys []translate.Key

	asCreate  []translate.AddressSet
	asUpdate  []asUpdate
	asDelete  []nbdb.AddressSet
	polCreate []translate.Policy
	polUpdate []polUpdate
	polDelete []attached
	natCreate []translate.NAT
	natUpdate []natUpdate
	natDelete []attached
	rtCreate  []translate.StaticRoute
	rtUpdate  []rtUpdate
	rtDelete  []attached
	// rtRelease are owned cluster routes handed over to ovn-kubernetes:
	// their external_ids are emptied instead of the row being deleted.
	rtRelease []attached

	had map[string]struct{} // diffAddressSets' scratch
}

type rtUpdate struct {
	uuid string
	want translate.StaticRoute
}

type asUpdate struct {
	uuid, id string
	add, del []string
	ids      map[string]string // non-nil when external_ids (or name) differ
	name     string
}

type polUpdate struct {
	uuid string
	want translate.Policy
}

type natUpdate struct {
	uuid string
	want translate.NAT
}

// attached is an owned row to delete and the router that references it.
type attached struct {
	uuid, id, router string
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool { return p.Len() == 0 }

// Len is the number of row changes.
func (p *Plan) Len() int {
	return len(p.asCreate) + len(p.asUpdate) + len(p.asDelete) + len(p.polCreate) + len(p.polUpdate) +
		len(p.polDelete) + len(p.natCreate) + len(p.natUpdate) + len(p.natDelete) +
		len(p.rtCreate) + len(p.rtUpdate) + len(p.rtDelete) + len(p.rtRelease)
}

// Change is one row that NB lacks, has extra, or has different.
type Change struct {
	Kind  string `json:"kind"` // missing | extra | different
	Table string `json:"table"`
	ID    string `json:"id"`
	What  string `json:"what,omitempty"`
}

func (c Change) String() string {
	s := fmt.Sprintf("%-9s %-21s %s", c.Kind, c.Table, c.ID)
	if c.What != "" {
		s += "  (" + c.What + ")"
	}
	return s
}

// Changes lists the plan for people (and `ovn-egress verify`).
func (p *Plan) Changes() []Change {
	var out []Change
	for _, r := range p.asCreate {
		out = append(out, Change{"missing", nbdb.AddressSetTable, r.ExternalIDs[translate.KeyID], fmt.Sprintf("%d addresses", len(r.Addresses))})
	}
	for _, u := range p.asUpdate {
		what := fmt.Sprintf("+%d -%d addresses", len(u.add), len(u.del))
		if u.ids != nil {
			what += ", name or external_ids"
		}
		out = append(out, Change{"different", nbdb.AddressSetTable, u.id, what})
	}
	for _, r := range p.asDelete {
		out = append(out, Change{"extra", nbdb.AddressSetTable, r.ExternalIDs[translate.KeyID], r.Name})
	}
	for _, r := range p.polCreate {
		out = append(out, Change{"missing", nbdb.LogicalRouterPolicyTable, r.ExternalIDs[translate.KeyID], fmt.Sprintf("%d %s", r.Priority, r.Match)})
	}
	for _, u := range p.polUpdate {
		out = append(out, Change{"different", nbdb.LogicalRouterPolicyTable, u.want.ExternalIDs[translate.KeyID], fmt.Sprintf("want %d %s %s %v", u.want.Priority, u.want.Match, u.want.Action, u.want.Nexthops)})
	}
	for _, r := range p.polDelete {
		out = append(out, Change{"extra", nbdb.LogicalRouterPolicyTable, r.id, "on " + r.router})
	}
	for _, r := range p.natCreate {
		out = append(out, Change{"missing", nbdb.NATTable, r.ExternalIDs[translate.KeyID], fmt.Sprintf("%s %s <- %s on %s", r.Type, r.ExternalIP, r.LogicalIP, r.Router)})
	}
	for _, u := range p.natUpdate {
		what := fmt.Sprintf("want %s %s <- %s", u.want.Type, u.want.ExternalIP, u.want.LogicalIP)
		if u.want.Match != "" {
			what += fmt.Sprintf(" match %q priority %d", u.want.Match, u.want.Priority)
		}
		out = append(out, Change{"different", nbdb.NATTable, u.want.ExternalIDs[translate.KeyID], what})
	}
	for _, r := range p.natDelete {
		out = append(out, Change{"extra", nbdb.NATTable, r.id, "on " + r.router})
	}
	for _, r := range p.rtCreate {
		out = append(out, Change{"missing", nbdb.LogicalRouterStaticRouteTable, r.ExternalIDs[translate.KeyID], fmt.Sprintf("%s %s via %s on %s", r.Policy, r.IPPrefix, r.Nexthop, r.Router)})
	}
	for _, u := range p.rtUpdate {
		out = append(out, Change{"different", nbdb.LogicalRouterStaticRouteTable, u.want.ExternalIDs[translate.KeyID], fmt.Sprintf("want %s %s via %s", u.want.Policy, u.want.IPPrefix, u.want.Nexthop)})
	}
	for _, r := range p.rtDelete {
		out = append(out, Change{"extra", nbdb.LogicalRouterStaticRouteTable, r.id, "on " + r.router})
	}
	for _, r := range p.rtRelease {
		out = append(out, Change{"release", nbdb.LogicalRouterStaticRouteTable, r.id, "on " + r.router + ", handed over to ovn-kubernetes"})
	}
	return out
}

// keyName is the k8s.ovn.org/name value the rows of a key carry; the client
// index on it narrows the cache lookups to one key.
func keyName(k translate.Key) string {
	switch k {
	case translate.ClusterKey:
		return "node-ips"
	case translate.UnassignedKey:
		return "unassigned"
	}
	if name, ok := k.EgressIP(); ok {
		return name
	}
	return k.Node()
}

// inPlaceKeys is the number of keys from which ownedByKey reads a whole
// table in place rather than each key's rows through the name index.
const inPlaceKeys = 8

// ownedByKey returns the rows of table that ovn-egress owns under keys, by
// key, in UUID order, READ ONLY (shallow copies: their slices and maps are
// the cache's). Many keys — a drain's sync diffs some fifty hosts' sets of
// hundreds of addresses — are read in place from the cache, like
// cachedRows, where a List per key would copy every row; a few keys are
// listed through the name index, sparing the walk of a table that
// ovn-kubernetes fills with thousands of rows.
func ownedByKey[T any](ctx context.Context, c client.Client, table string, keys map[translate.Key]bool,
	probe func(name string) *T, ids func(*T) map[string]string, uuid func(*T) string) (map[translate.Key][]T, error) {
	out := make(map[translate.Key][]T, len(keys))
	if len(keys) < inPlaceKeys {
		for k := range keys {
			var rows []T
			if err := c.Where(probe(keyName(k))).List(ctx, &rows); err != nil && err != client.ErrNotFound {
				return nil, fmt.Errorf("list %s rows of %s: %w", table, k, err)
			}
			for i := range rows {
				if got, ok := translate.KeyOf(ids(&rows[i])); ok && got == k {
					out[k] = append(out[k], rows[i])
				}
			}
		}
	} else {
		for _, m := range cachedRows(c, table) {
			if r, ok := m.(*T); ok {
				if k, ok := translate.KeyOf(ids(r)); ok && keys[k] {
					out[k] = append(out[k], *r)
				}
			}
		}
	}
	for _, rows := range out {
		slices.SortFunc(rows, func(a, b T) int { return strings.Compare(uuid(&a), uuid(&b)) })
	}
	return out, ctx.Err()
}

func nameIDs(name string) map[string]string { return map[string]string{translate.KeyName: name} }

func addressSetProbe(name string) *nbdb.AddressSet {
	return &nbdb.AddressSet{ExternalIDs: nameIDs(name)}
}
func addressSetIDs(r *nbdb.AddressSet) map[string]string { return r.ExternalIDs }
func addressSetUUID(r *nbdb.AddressSet) string           { return r.UUID }

func policyProbe(name string) *nbdb.LogicalRouterPolicy {
	return &nbdb.LogicalRouterPolicy{ExternalIDs: nameIDs(name)}
}
func policyIDs(r *nbdb.LogicalRouterPolicy) map[string]string { return r.ExternalIDs }
func policyUUID(r *nbdb.LogicalRouterPolicy) string           { return r.UUID }

func routeProbe(name string) *nbdb.LogicalRouterStaticRoute {
	return &nbdb.LogicalRouterStaticRoute{ExternalIDs: nameIDs(name)}
}
func routeIDs(r *nbdb.LogicalRouterStaticRoute) map[string]string { return r.ExternalIDs }
func routeUUID(r *nbdb.LogicalRouterStaticRoute) string           { return r.UUID }

// BuildPlan diffs the desired rows of keys against the owned rows in the
// client cache. Keys absent from desired are planned to be emptied.
func BuildPlan(ctx context.Context, c client.Client, keys []translate.Key, desired *translate.Desired) (*Plan, error) {
	p := &Plan{Keys: keys}
	refs := &routerRefs{ctx: ctx, c: c}
	asked := make(map[translate.Key]bool, len(keys))
	for _, k := range keys {
		asked[k] = true
	}
	sets, err := ownedByKey(ctx, c, nbdb.AddressSetTable, asked, addressSetProbe, addressSetIDs, addressSetUUID)
	if err != nil {
		return nil, err
	}
	pols, err := ownedByKey(ctx, c, nbdb.LogicalRouterPolicyTable, asked, policyProbe, policyIDs, policyUUID)
	if err != nil {
		return nil, err
	}
	nats, err := ownedNATs(ctx, c, asked)
	if err != nil {
		return nil, err
	}
	routes, err := ownedByKey(ctx, c, nbdb.LogicalRouterStaticRouteTable, asked, routeProbe, routeIDs, routeUUID)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		want := desired.Rows[k]
		if want == nil {
			want = &translate.Rows{}
		}
		p.diffAddressSets(want.AddressSets, sets[k])
		p.diffPolicies(want.Policies, pols[k], refs)
		p.diffNATs(want.NATs, nats[k], refs)
		p.diffRoutes(want.Routes, routes[k], refs, desired.ReleaseClusterRoutes)
	}
	if refs.err != nil {
		return nil, refs.err
	}
	return p, nil
}

// match pairs the desired rows with the owned rows by k8s.ovn.org/id and
// calls found for each pair (the first of any duplicates), missing for a
// desired row NB lacks, and extra for every owned row nobody wants
// (duplicates included), extra rows in id order.
func match[W, H any](want []W, have []H, wantIDs func(*W) map[string]string, haveIDs func(*H) map[string]string,
	found func(w W, cur H), missing func(w W), extra func(id string, h H)) {
	byID := map[string][]H{}
	for _, h := range have {
		id := haveIDs(&h)[translate.KeyID]
		byID[id] = append(byID[id], h)
	}
	for _, w := range want {
		id := wantIDs(&w)[translate.KeyID]
		rows := byID[id]
		delete(byID, id)
		if len(rows) == 0 {
			missing(w)
			continue
		}
		for _, dup := range rows[1:] {
			extra(id, dup)
		}
		found(w, rows[0])
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		for _, h := range byID[id] {
			extra(id, h)
		}
	}
}

// diffAddressSets diffs against rows read from the cache (READ ONLY).
func (p *Plan) diffAddressSets(want []translate.AddressSet, have []nbdb.AddressSet) {
	match(want, have, func(w *translate.AddressSet) map[string]string { return w.ExternalIDs },
		func(h *nbdb.AddressSet) map[string]string { return h.ExternalIDs },
		func(w translate.AddressSet, cur nbdb.AddressSet) {
			u := asUpdate{uuid: cur.UUID, id: w.ExternalIDs[translate.KeyID]}
			if p.had == nil {
				p.had = make(map[string]struct{}, len(cur.Addresses))
			}
			had := p.had // one map for every set: a drain diffs ~50 sets of hundreds
			clear(had)
			for _, a := range cur.Addresses {
				had[a] = struct{}{}
			}
			for _, a := range w.Addresses {
				if _, ok := had[a]; !ok {
					u.add = append(u.add, a)
				}
				delete(had, a)
			}
			u.del = slices.Sorted(maps.Keys(had))
			if cur.Name != w.Name || !maps.Equal(cur.ExternalIDs, w.ExternalIDs) {
				u.ids, u.name = w.ExternalIDs, w.Name
			}
			if len(u.add) > 0 || len(u.del) > 0 || u.ids != nil {
				p.asUpdate = append(p.asUpdate, u)
			}
		},
		func(w translate.AddressSet) { p.asCreate = append(p.asCreate, w) },
		func(_ string, h nbdb.AddressSet) { p.asDelete = append(p.asDelete, h) })
}

func (p *Plan) diffPolicies(want []translate.Policy, have []nbdb.LogicalRouterPolicy, refs *routerRefs) {
	match(want, have, func(w *translate.Policy) map[string]string { return w.ExternalIDs },
		func(h *nbdb.LogicalRouterPolicy) map[string]string { return h.ExternalIDs },
		func(w translate.Policy, cur nbdb.LogicalRouterPolicy) {
			if cur.Priority != w.Priority || cur.Match != w.Match || string(cur.Action) != w.Action ||
				!slices.Equal(sortedCopy(cur.Nexthops), sortedCopy(w.Nexthops)) || !maps.Equal(cur.ExternalIDs, w.ExternalIDs) ||
				!sameOptions(cur.Options, w.Options) {
				p.polUpdate = append(p.polUpdate, polUpdate{cur.UUID, w})
			}
		},
		func(w translate.Policy) { p.polCreate = append(p.polCreate, w) },
		func(id string, h nbdb.LogicalRouterPolicy) {
			p.polDelete = append(p.polDelete, attached{h.UUID, id, refs.router(h.UUID)})
		})
}

func (p *Plan) diffNATs(want []translate.NAT, have []natRow, refs *routerRefs) {
	match(want, have, func(w *translate.NAT) map[string]string { return w.ExternalIDs },
		func(h *natRow) map[string]string { return h.ExternalIDs },
		func(w translate.NAT, cur natRow) {
			// A NAT row on another router moves: deleted there, created here.
			if r := refs.router(cur.UUID); r != w.Router {
				p.natDelete = append(p.natDelete, attached{cur.UUID, w.ExternalIDs[translate.KeyID], r})
				p.natCreate = append(p.natCreate, w)
				return
			}
			if natDiffers(cur, w) {
				p.natUpdate = append(p.natUpdate, natUpdate{cur.UUID, w})
			}
		},
		func(w translate.NAT) { p.natCreate = append(p.natCreate, w) },
		func(id string, h natRow) {
			p.natDelete = append(p.natDelete, attached{h.UUID, id, refs.router(h.UUID)})
		})
}

func (p *Plan) diffRoutes(want []translate.StaticRoute, have []nbdb.LogicalRouterStaticRoute, refs *routerRefs, release bool) {
	match(want, have, func(w *translate.StaticRoute) map[string]string { return w.ExternalIDs },
		func(h *nbdb.LogicalRouterStaticRoute) map[string]string { return h.ExternalIDs },
		func(w translate.StaticRoute, cur nbdb.LogicalRouterStaticRoute) {
			policy := ""
			if cur.Policy != nil {
				policy = string(*cur.Policy)
			}
			if cur.IPPrefix != w.IPPrefix || cur.Nexthop != w.Nexthop || policy != w.Policy || !maps.Equal(cur.ExternalIDs, w.ExternalIDs) {
				p.rtUpdate = append(p.rtUpdate, rtUpdate{cur.UUID, w})
			}
		},
		func(w translate.StaticRoute) { p.rtCreate = append(p.rtCreate, w) },
		func(id string, h nbdb.LogicalRouterStaticRoute) {
			a := attached{h.UUID, id, refs.router(h.UUID)}
			if release && h.ExternalIDs[translate.KeyOwnerType] == translate.OwnerClusterRoute {
				p.rtRelease = append(p.rtRelease, a)
				return
			}
			p.rtDelete = append(p.rtDelete, a)
		})
}

// sameOptions compares option maps, nil and empty alike.
func sameOptions(a, b map[string]string) bool { return len(a) == len(b) && maps.Equal(a, b) }

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// routerRefs maps policy and NAT row UUIDs to the router referencing them.
// It lists the routers only when first asked: a sync that changes nothing,
// or only adds, never walks every router's references.
type routerRefs struct {
	ctx    context.Context
	c      client.Client
	byUUID map[string]string
	err    error
}

func (r *routerRefs) router(uuid string) string {
	if r.byUUID == nil && r.err == nil {
		var routers []nbdb.LogicalRouter
		if err := r.c.List(r.ctx, &routers); err != nil {
			r.err = fmt.Errorf("list routers: %w", err)
			return ""
		}
		r.byUUID = map[string]string{}
		for _, lr := range routers {
			for _, u := range lr.Policies {
				r.byUUID[u] = lr.Name
			}
			for _, u := range lr.Nat {
				r.byUUID[u] = lr.Name
			}
			for _, u := range lr.StaticRoutes {
				r.byUUID[u] = lr.Name
			}
		}
	}
	return r.byUUID[uuid]
}

// OwnedKeys lists every key that has rows owned by ovn-egress in the cache.
func OwnedKeys(ctx context.Context, c client.Client) ([]translate.Key, error) {
	seen := map[translate.Key]bool{}
	add := func(ids map[string]string) bool {
		if k, ok := translate.KeyOf(ids); ok {
			seen[k] = true
		}
		return false
	}
	var as []nbdb.AddressSet
	var ps []nbdb.LogicalRouterPolicy
	var rs []nbdb.LogicalRouterStaticRoute
	for _, q := range []struct {
		api  client.ConditionalAPI
		into any
	}{
		{c.WhereCache(func(r *nbdb.AddressSet) bool { return add(r.ExternalIDs) }), &as},
		{c.WhereCache(func(r *nbdb.LogicalRouterPolicy) bool { return add(r.ExternalIDs) }), &ps},
		{c.WhereCache(func(r *nbdb.LogicalRouterStaticRoute) bool { return add(r.ExternalIDs) }), &rs},
	} {
		if err := q.api.List(ctx, q.into); err != nil && err != client.ErrNotFound {
			return nil, fmt.Errorf("list owned rows: %w", err)
		}
	}
	if err := natOwners(ctx, c, add); err != nil {
		return nil, fmt.Errorf("list owned NAT rows: %w", err)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}
