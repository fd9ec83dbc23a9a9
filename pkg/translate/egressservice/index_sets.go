package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"maps"
	"net/netip"
	"slices"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The Index's address sets and the rows of its keys. A set keeps its last
// rendering and the addresses that came and went since, so that rendering
// it again costs the change, not the set: a drain moves a few services onto
// each host of hundreds.

// setState is one address set: the contribution of each service that puts
// addresses into it, and its last rendering.
type setState struct {
	key   setKey
	parts map[string]*contribution // by service
	// rendered is the last rendering (nil: none to start from); delta the
	// addresses that came (+1) and went (-1) since.
	rendered *renderedSet
	delta    map[netip.Addr]int
	// changed: a contribution came or went since the last rendering.
	changed bool
	// first is the first service of parts by namespace and name ("" to be
	// found again), whose nexthop the set takes; withNATs counts the parts
	// with NAT rows.
	first    string
	withNATs int
	// nats are the parts' NAT rows as rendered, by service (one row per
	// endpoint, without Config.NATMatch).
	nats map[string][]translate.NAT
}

// renderedSet is the rows of one set.
type renderedSet struct {
	nexthop netip.Addr
	set     translate.AddressSet
	addrs   []netip.Addr // set's addresses, sorted as set.Addresses (its external_ids: addSet)
	nats    []translate.NAT
	natSets []translate.AddressSet // with Config.NATMatch: one per service
	// digest is AddressesDigest(set.Addresses), kept from rendering to
	// rendering at the cost of the addresses that came and went.
	digest uint64
}

func (x *Index) merge(c *contribution) {
	st := x.sets[c.set]
	if st == nil {
		st = &setState{key: c.set, parts: map[string]*contribution{}}
		x.sets[c.set] = st
		k := c.set.key()
		if x.byKey[k] == nil {
			x.byKey[k] = map[setKey]struct{}{}
		}
		x.byKey[k][c.set] = struct{}{}
	}
	st.parts[c.svc] = c // a part it replaces went first (unmerge), with its NAT rows
	st.changed = true
	if st.first != "" && compareServiceKeys(c.svc, st.first) < 0 {
		st.first = c.svc
	}
	if len(c.nats) > 0 {
		st.withNATs++
	}
	st.note(c.addrs, 1)
	x.touch(c.set.key())
}

func (x *Index) unmerge(c *contribution) {
	st := x.sets[c.set]
	delete(st.parts, c.svc)
	delete(st.nats, c.svc)
	st.changed = true
	if c.svc == st.first {
		st.first = ""
	}
	if len(c.nats) > 0 {
		st.withNATs--
	}
	st.note(c.addrs, -1)
	k := c.set.key()
	x.touch(k)
	if len(st.parts) == 0 {
		delete(x.sets, c.set)
		delete(x.byKey[k], c.set)
		if len(x.byKey[k]) == 0 {
			delete(x.byKey, k)
		}
	}
}

// note records addresses that came (d=1) or went (d=-1) since the last
// rendering; past half of the set's size it gives the rendering up.
func (st *setState) note(addrs []netip.Addr, d int) {
	if st.rendered == nil || len(addrs) == 0 {
		return
	}
	if st.delta == nil {
		st.delta = map[netip.Addr]int{}
	}
	for _, a := range addrs {
		if st.delta[a] += d; st.delta[a] == 0 {
			delete(st.delta, a)
		}
	}
	if 2*len(st.delta) > len(st.rendered.addrs)+16 {
		st.rendered, st.delta = nil, nil
	}
}

// nexthop is where the set reroutes to: every contribution names the same
// one (they read the same node), the first service's is taken.
func (st *setState) nexthop() netip.Addr {
	if st.first == "" {
		for svc := range st.parts {
			if st.first == "" || compareServiceKeys(svc, st.first) < 0 {
				st.first = svc
			}
		}
	}
	if c := st.parts[st.first]; c != nil {
		return c.nexthop
	}
	return netip.Addr{}
}

// render returns the rows of a set: its last rendering when nothing
// changed, patched with what came and went when that is little, afresh
// otherwise.
func (x *Index) render(st *setState) *renderedSet {
	hop := st.nexthop()
	if rs := st.rendered; rs != nil && rs.nexthop == hop && !st.changed {
		return rs
	}
	rs := x.patch(st, hop)
	if rs == nil {
		rs = x.renderAfresh(st, hop)
	}
	st.rendered, st.delta, st.changed = rs, nil, false
	return rs
}

func (x *Index) renderAfresh(st *setState, hop netip.Addr) *renderedSet {
	k, cfg := st.key, x.w.cfg
	n, withNATs := 0, st.withNATs > 0
	for _, c := range st.parts {
		n += len(c.addrs)
	}
	ips := make([]netip.Addr, 0, n)
	for _, c := range st.parts {
		ips = append(ips, c.addrs...)
	}
	sorted := translate.SortedAddrs(ips)
	rs := &renderedSet{nexthop: hop, addrs: sorted,
		set: translate.AddressSet{Name: translate.AddressSetName(setID(k.owner, k.node, k.family)), Addresses: translate.FormatAddrs(sorted)}}
	rs.digest = AddressesDigest(rs.set.Addresses)
	switch {
	case withNATs && cfg.NATMatch:
		rs.nats, rs.natSets = matchNATs(k, rs.set.Name, st.parts)
	case withNATs:
		rs.nats = x.endpointNATs(st)
	}
	return rs
}

// patch renders a set from its last rendering and the addresses that came
// and went since; nil when it cannot (no rendering, NAT rows with matches,
// an address there twice).
func (x *Index) patch(st *setState, hop netip.Addr) *renderedSet {
	prev := st.rendered
	if prev == nil || len(prev.natSets) > 0 {
		return nil
	}
	gone := map[netip.Addr]bool{}
	var add []netip.Addr
	withNATs := st.withNATs > 0
	for a, d := range st.delta {
		if d < 0 {
			gone[a] = true
		} else {
			add = append(add, a)
		}
	}
	if withNATs && x.w.cfg.NATMatch {
		return nil // per-service NAT sets: rendered afresh
	}
	slices.SortFunc(add, func(a, b netip.Addr) int { return a.Compare(b) })
	addrs, strs, ok := mergeAddrs(prev.addrs, prev.set.Addresses, gone, add)
	if !ok {
		return nil
	}
	rs := &renderedSet{nexthop: hop, set: prev.set, addrs: addrs, digest: prev.digest}
	rs.set.Addresses = strs
	for a := range gone {
		rs.digest -= addressHash(a.String())
	}
	for _, a := range add {
		rs.digest += addressHash(a.String())
	}
	if withNATs {
		rs.nats = x.endpointNATs(st)
	}
	return rs
}

// endpointNATs are the set's NAT rows, one per endpoint (each part's
// rendered once while it stays).
func (x *Index) endpointNATs(st *setState) []translate.NAT {
	if st.nats == nil {
		st.nats = map[string][]translate.NAT{}
	}
	var out []translate.NAT
	for _, svc := range slices.Sorted(maps.Keys(st.parts)) {
		c := st.parts[svc]
		rows, ok := st.nats[svc]
		if !ok && len(c.nats) > 0 {
			rows = make([]translate.NAT, len(c.nats))
			for i, e := range c.nats {
				rows[i] = endpointNAT(st.key, e)
			}
			st.nats[svc] = rows
		}
		out = append(out, rows...)
	}
	return out
}

// mergeAddrs returns the sorted addresses (and their strings) of prev
// without gone and with add (sorted); ok is false when an address would be
// there twice. The strings of addresses that stay are reused.
func mergeAddrs(prev []netip.Addr, prevStrs []string, gone map[netip.Addr]bool, add []netip.Addr) ([]netip.Addr, []string, bool) {
	n := len(prev) + len(add) - len(gone)
	addrs, strs := make([]netip.Addr, 0, max(n, 0)), make([]string, 0, max(n, 0))
	push := func(a netip.Addr, s string) bool {
		if len(addrs) > 0 && addrs[len(addrs)-1] == a {
			return false
		}
		addrs, strs = append(addrs, a), append(strs, s)
		return true
	}
	i, j := 0, 0
	for i < len(prev) || j < len(add) {
		if j < len(add) && (i == len(prev) || add[j].Compare(prev[i]) < 0) {
			if !push(add[j], add[j].String()) {
				return nil, nil, false
			}
			j++
			continue
		}
		a, s := prev[i], prevStrs[i]
		i++
		if gone[a] {
			continue
		}
		if !push(a, s) {
			return nil, nil, false
		}
	}
	return addrs, strs, true
}

// AddressesDigest is an order-independent digest of an address set's
// members: the sum of their FNV-1a hashes. An NB row's echo is compared by
// it (the controller records what it wrote; Digests).
func AddressesDigest(addrs []string) uint64 {
	var sum uint64
	for _, a := range addrs {
		sum += addressHash(a)
	}
	return sum
}

func addressHash(a string) uint64 {
	h := uint64(14695981039346656037) // FNV-1a 64
	for i := 0; i < len(a); i++ {
		h ^= uint64(a[i])
		h *= 1099511628211
	}
	return h
}

// Digests returns the AddressesDigest of every address set Rows rendered
// under k, by name, each kept from rendering to rendering (a set of
// thousands costs what came and went); the sets it does not keep (the
// node-IP and NAT sets) are left to the caller.
func (x *Index) Digests(k translate.Key) map[string]uint64 {
	out := map[string]uint64{}
	for sk := range x.byKey[k] {
		if rs := x.sets[sk].rendered; rs != nil {
			out[rs.set.Name] = rs.digest
		}
	}
	return out
}

// Rows renders the rows of keys (a key without rows is left out).
func (x *Index) Rows(keys []translate.Key) *translate.Desired {
	d := &translate.Desired{Rows: map[translate.Key]*translate.Rows{}, ReleaseClusterRoutes: x.w.zone != "" && x.zone.ClusterRouteShared}
	for _, k := range keys {
		r := &translate.Rows{}
		switch {
		case k == translate.ClusterKey:
			x.nodeIPRows(r)
		case k == translate.UnassignedKey:
			x.unassignedRows(r)
		case k.IsNode():
			for sk := range x.byKey[k] {
				x.addSet(r, sk, x.render(x.sets[sk]))
			}
			x.routeRows(r, k.Node())
		}
		if r.Len() > 0 {
			r.Sort()
			d.Rows[k] = r
		}
	}
	return d
}

// addSet adds a set's rows to r. Its external_ids and policies are made
// afresh, not kept: the Index of a zone's agent at 5,000 nodes would hold
// some 50 MiB of them.
func (x *Index) addSet(r *translate.Rows, k setKey, rs *renderedSet) {
	as := rs.set
	as.ExternalIDs = translate.OwnerIDs(k.owner, k.node, k.family)
	r.AddressSets = append(r.AddressSets, as)
	r.AddressSets = append(r.AddressSets, rs.natSets...)
	r.Policies = append(r.Policies, setPolicies(x.w.cfg, k, rs.set.Name, rs.nexthop)...)
	r.NATs = append(r.NATs, rs.nats...)
}

// unassignedRows are the drop sets of --unassigned-traffic=drop: one per
// family even when empty, so that the drop policy does not come and go
// with endpoints.
func (x *Index) unassignedRows(r *translate.Rows) {
	if x.w.cfg.UnassignedTraffic != translate.UnassignedDrop {
		return
	}
	for _, f := range x.w.cfg.Families() {
		k := setKey{unassignedName, translate.OwnerUnassigned, f}
		st := x.sets[k]
		if st == nil {
			st = &setState{key: k}
		}
		x.addSet(r, k, x.render(st))
	}
}

// routeRows give a host of this zone that serves a LoadBalancerIP service
// a src-ip route of the cluster subnets to its GR: in interconnect, pod
// traffic of other zones arrives over the transit switch and must be
// routed before the reroute policies see it (ovn_cluster_router routes,
// then applies policies). A route someone else already has for the subnet
// (ovn-kubernetes, with its egress features on) is left to them. An egress
// node of this zone holding an EgressIP (ZoneFacts.EgressNodes) gets the
// route too: the selected pods of other zones reach its GR the same way.
// While ovn-kubernetes' EgressIP may rely on such a route
// (ZoneFacts.ClusterRouteShared), a route ovn-egress no longer wants is
// handed over, never deleted (Desired.ReleaseClusterRoutes); and when the
// route it deferred to disappears, its own is added again at once (someone
// must route that traffic).
func (x *Index) routeRows(r *translate.Rows, host string) {
	n := x.w.nodes[host]
	if x.w.zone == "" || n == nil || !x.w.inZone(host) || (len(x.routes[host]) == 0 && !x.zone.EgressNodes[host]) {
		return
	}
	for _, subnet := range x.w.cfg.ClusterSubnets {
		f := ipfamily.OfPrefix(subnet)
		if x.zone.ForeignClusterRoutes[subnet.Masked()] {
			continue
		}
		join, ok := n.JoinIPs[f]
		if gw, found := x.w.gateways[host]; found && gw.JoinIPs[f].IsValid() {
			join, ok = gw.JoinIPs[f], true
		}
		if !ok {
			continue
		}
		r.Routes = append(r.Routes, translate.StaticRoute{Router: translate.ClusterRouter, IPPrefix: subnet.Masked().String(), Nexthop: join.String(),
			Policy: "src-ip", ExternalIDs: translate.OwnerIDs(translate.OwnerClusterRoute, host, f)})
	}
}

// nodeIPRows are the cluster-wide node-IP sets, one per family.
func (x *Index) nodeIPRows(r *translate.Rows) {
	for _, f := range x.w.cfg.Families() {
		var addrs []netip.Addr
		for _, n := range x.w.nodes {
			for _, ip := range n.HostIPs {
				if ipfamily.Of(ip) == f {
					addrs = append(addrs, ip)
				}
			}
		}
		ids := translate.OwnerIDs(translate.OwnerNodeIPs, "node-ips", f)
		r.AddressSets = append(r.AddressSets, translate.AddressSet{Name: translate.AddressSetName(ids[translate.KeyID]), Addresses: translate.AddrStrings(addrs), ExternalIDs: ids})
	}
}
