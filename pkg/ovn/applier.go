package ovn

import (
	"context"
	"fmt"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// chunk is how many non-root rows one group creates or deletes together
// with the router mutation that (de)references them: at most 1000, and
// small enough that a group fits the operation bound.
func (a *Applier) chunk() int { return max(1, min(1000, a.maxOps-1)) }

// DefaultMaxOps bounds the operations of one transaction: a very large plan
// (a first sync, a big sweep) is split between keys, so no single transaction
// stalls a RAFT leader past its election timer.
const DefaultMaxOps = 5000

// Applier writes plans into NB.
type Applier struct {
	c       client.Client
	maxOps  int
	metrics *Metrics
}

// NewApplier returns an applier over a connected, monitoring NB client.
func NewApplier(c client.Client, maxOps int) *Applier {
	if maxOps <= 0 {
		maxOps = DefaultMaxOps
	}
	return &Applier{c: c, maxOps: maxOps}
}

// WithMetrics makes the applier count its transactions in m (nil: none).
func (a *Applier) WithMetrics(m *Metrics) *Applier {
	a.metrics = m
	return a
}

// Stats says what an Apply wrote.
type Stats struct {
	Transactions int
	Operations   int
	Changes      int
	// Plan is the time spent diffing against the cache, Write the time
	// spent in transactions (until NB's reply).
	Plan, Write time.Duration
}

// Apply converges the rows of keys on desired: it reads the owned rows of
// those keys from the cache, and writes the difference in one transaction
// (split between keys only when it exceeds the operation bound), checking
// every operation's result. Nothing changed means nothing written.
func (a *Applier) Apply(ctx context.Context, keys []translate.Key, desired *translate.Desired) (Stats, error) {
	start := time.Now()
	plan, err := BuildPlan(ctx, a.c, keys, desired)
	if err != nil {
		return Stats{}, err
	}
	planned := time.Now()
	st, err := a.ApplyPlan(ctx, plan)
	st.Plan, st.Write = planned.Sub(start), time.Since(planned)
	return st, err
}

// ApplyPlan writes a plan built by BuildPlan.
func (a *Applier) ApplyPlan(ctx context.Context, plan *Plan) (Stats, error) {
	st := Stats{Changes: plan.Len()}
	if plan.Empty() {
		return st, nil
	}
	groups, err := a.ops(plan)
	if err != nil {
		return st, err
	}
	var batch []opGroup
	n := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var ops []ovsdb.Operation
		var checks []mutateCheck
		for _, g := range batch {
			for _, m := range g.mustMatch {
				checks = append(checks, mutateCheck{index: len(ops) + m.index, router: m.router})
			}
			ops = append(ops, g.ops...)
		}
		if err := a.transact(ctx, ops, checks); err != nil {
			return err
		}
		st.Transactions++
		st.Operations += len(ops)
		batch, n = nil, 0
		return nil
	}
	for _, g := range groups {
		if n > 0 && n+len(g.ops) > a.maxOps {
			if err := flush(); err != nil {
				return st, err
			}
		}
		batch = append(batch, g)
		n += len(g.ops)
	}
	return st, flush()
}

// mutateCheck names a router mutation that must match exactly one router:
// a mutation of a router that does not exist matches nothing, and the rows
// it was to reference would be garbage-collected — a half-written state.
type mutateCheck struct {
	index  int
	router string
}

// opGroup is a unit that must stay in one transaction (rows and the router
// mutation that references them).
type opGroup struct {
	ops       []ovsdb.Operation
	mustMatch []mutateCheck
}

func (a *Applier) transact(ctx context.Context, ops []ovsdb.Operation, checks []mutateCheck) (err error) {
	start := time.Now()
	defer func() { a.metrics.transacted(len(ops), time.Since(start), err) }()
	res, err := a.c.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("nb transaction (%d operations): %w", len(ops), err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("nb transaction (%d operations): %w", len(ops), err)
	}
	for _, c := range checks {
		if c.index < len(res) && res[c.index].Count != 1 {
			return fmt.Errorf("nb transaction: router %s matched %d rows, want 1", c.router, res[c.index].Count)
		}
	}
	return nil
}

func routerMutation(c client.Client, router, column string, mutator ovsdb.Mutator, uuids []string) ([]ovsdb.Operation, error) {
	lr := &nbdb.LogicalRouter{}
	field := any(&lr.Policies)
	switch column {
	case "nat":
		field = &lr.Nat
	case "static_routes":
		field = &lr.StaticRoutes
	}
	return c.WhereAll(lr, model.Condition{Field: &lr.Name, Function: ovsdb.ConditionEqual, Value: router}).
		Mutate(lr, model.Mutation{Field: field, Mutator: mutator, Value: uuids})
}

// ops turns the plan into groups of operations: the deletions first, then
// updates, then creations, so a row moving between routers or a set being
// replaced never exists twice.
func (a *Applier) ops(p *Plan) ([]opGroup, error) {
	var groups []opGroup
	add := func(ops []ovsdb.Operation, err error) error {
		if err != nil {
			return err
		}
		groups = append(groups, opGroup{ops: ops})
		return nil
	}
	// A row deleted while still referenced fails the transaction's
	// referential integrity, so rows and the mutation that dereferences
	// them share a group; a big sweep becomes groups of at most a chunk of
	// rows each, router by router.
	detach := func(rows []attached, column string, del func(uuid string) ([]ovsdb.Operation, error)) error {
		byRouter := map[string][]string{}
		var routers []string
		for _, r := range rows {
			if _, ok := byRouter[r.router]; !ok {
				routers = append(routers, r.router)
			}
			byRouter[r.router] = append(byRouter[r.router], r.uuid)
		}
		for _, router := range routers {
			uuids := byRouter[router]
			for i := 0; i < len(uuids); i += a.chunk() {
				chunk := uuids[i:min(i+a.chunk(), len(uuids))]
				var g opGroup
				for _, u := range chunk {
					ops, err := del(u)
					if err != nil {
						return err
					}
					g.ops = append(g.ops, ops...)
				}
				if router != "" { // "": referenced by nothing, the delete alone removes it
					ops, err := routerMutation(a.c, router, column, ovsdb.MutateOperationDelete, chunk)
					if err != nil {
						return err
					}
					g.ops = append(g.ops, ops...)
				}
				groups = append(groups, g)
			}
		}
		return nil
	}
	if err := detach(p.polDelete, "policies", func(u string) ([]ovsdb.Operation, error) {
		return a.c.Where(&nbdb.LogicalRouterPolicy{UUID: u}).Delete()
	}); err != nil {
		return nil, err
	}
	if err := detach(p.natDelete, "nat", func(u string) ([]ovsdb.Operation, error) {
		return natDeleteOps(a.c, u)
	}); err != nil {
		return nil, err
	}
	if err := detach(p.rtDelete, "static_routes", func(u string) ([]ovsdb.Operation, error) {
		return a.c.Where(&nbdb.LogicalRouterStaticRoute{UUID: u}).Delete()
	}); err != nil {
		return nil, err
	}
	for _, r := range p.asDelete {
		if err := add(a.c.Where(&nbdb.AddressSet{UUID: r.UUID}).Delete()); err != nil {
			return nil, err
		}
	}
	for _, u := range p.asUpdate {
		as := &nbdb.AddressSet{UUID: u.uuid}
		var ops []ovsdb.Operation
		for _, m := range []struct {
			mut   ovsdb.Mutator
			addrs []string
		}{{ovsdb.MutateOperationDelete, u.del}, {ovsdb.MutateOperationInsert, u.add}} {
			if len(m.addrs) == 0 {
				continue
			}
			o, err := a.c.Where(as).Mutate(as, model.Mutation{Field: &as.Addresses, Mutator: m.mut, Value: m.addrs})
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
		}
		if u.ids != nil {
			want := &nbdb.AddressSet{UUID: u.uuid, Name: u.name, ExternalIDs: u.ids}
			o, err := a.c.Where(as).Update(want, &want.Name, &want.ExternalIDs)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
		}
		groups = append(groups, opGroup{ops: ops})
	}
	for _, u := range p.polUpdate {
		w := policyModel(u.want)
		w.UUID = u.uuid
		if err := add(a.c.Where(&nbdb.LogicalRouterPolicy{UUID: u.uuid}).Update(w, &w.Priority, &w.Match, &w.Action, &w.Nexthops, &w.Options, &w.ExternalIDs)); err != nil {
			return nil, err
		}
	}
	for _, u := range p.natUpdate {
		if err := add(natUpdateOps(a.c, u.uuid, u.want)); err != nil {
			return nil, err
		}
	}
	for _, r := range p.rtRelease {
		w := &nbdb.LogicalRouterStaticRoute{UUID: r.uuid, ExternalIDs: map[string]string{}}
		if err := add(a.c.Where(&nbdb.LogicalRouterStaticRoute{UUID: r.uuid}).Update(w, &w.ExternalIDs)); err != nil {
			return nil, err
		}
	}
	for _, u := range p.rtUpdate {
		w := routeModel(u.want)
		w.UUID = u.uuid
		if err := add(a.c.Where(&nbdb.LogicalRouterStaticRoute{UUID: u.uuid}).Update(w, &w.IPPrefix, &w.Nexthop, &w.Policy, &w.ExternalIDs)); err != nil {
			return nil, err
		}
	}
	for _, r := range p.asCreate {
		if err := add(a.c.Create(&nbdb.AddressSet{Name: r.Name, Addresses: r.Addresses, ExternalIDs: r.ExternalIDs})); err != nil {
			return nil, err
		}
	}
	n := 0
	var polModels, natModels, rtModels []attachedModel
	for _, r := range p.polCreate {
		n++
		m := policyModel(r)
		m.UUID = fmt.Sprintf("pol%d", n)
		polModels = append(polModels, attachedModel{r.Router, m})
	}
	for _, r := range p.natCreate {
		n++
		m, err := natModel(a.c, r, fmt.Sprintf("nat%d", n))
		if err != nil {
			return nil, err
		}
		natModels = append(natModels, attachedModel{r.Router, m})
	}
	for _, r := range p.rtCreate {
		n++
		m := routeModel(r)
		m.UUID = fmt.Sprintf("route%d", n)
		rtModels = append(rtModels, attachedModel{r.Router, m})
	}
	for _, c := range []struct {
		column string
		rows   []attachedModel
	}{{"policies", polModels}, {"nat", natModels}, {"static_routes", rtModels}} {
		gs, err := a.createAttached(c.column, c.rows)
		if err != nil {
			return nil, err
		}
		groups = append(groups, gs...)
	}
	return groups, nil
}

// attachedModel is a new non-root row (named UUID set) and its router.
type attachedModel struct {
	router string
	row    model.Model
}

// createAttached inserts rows and references them from their routers' column,
// router by router, in chunks so a huge first sync splits into bounded
// transactions. Each chunk's insert and mutation stay in one group: an
// unreferenced row of a non-root table would be garbage-collected.
func (a *Applier) createAttached(column string, rows []attachedModel) ([]opGroup, error) {
	chunk := a.chunk()
	byRouter := map[string][]model.Model{}
	var order []string
	for _, r := range rows {
		if byRouter[r.router] == nil {
			order = append(order, r.router)
		}
		byRouter[r.router] = append(byRouter[r.router], r.row)
	}
	var groups []opGroup
	for _, router := range order {
		ms := byRouter[router]
		for i := 0; i < len(ms); i += chunk {
			var create []ovsdb.Operation
			var uuids []string
			for _, m := range ms[i:min(i+chunk, len(ms))] {
				o, err := a.c.Create(m)
				if err != nil {
					return nil, err
				}
				create = append(create, o...)
				uuids = append(uuids, m.(interface{ GetUUID() string }).GetUUID())
			}
			mut, err := routerMutation(a.c, router, column, ovsdb.MutateOperationInsert, uuids)
			if err != nil {
				return nil, err
			}
			groups = append(groups, opGroup{ops: append(create, mut...), mustMatch: []mutateCheck{{index: len(create), router: router}}})
		}
	}
	return groups, nil
}

func policyModel(p translate.Policy) *nbdb.LogicalRouterPolicy {
	return &nbdb.LogicalRouterPolicy{Priority: p.Priority, Match: p.Match, Action: nbdb.LogicalRouterPolicyAction(p.Action),
		Nexthops: p.Nexthops, Options: p.Options, ExternalIDs: p.ExternalIDs}
}

func routeModel(r translate.StaticRoute) *nbdb.LogicalRouterStaticRoute {
	policy := nbdb.LogicalRouterStaticRoutePolicy(r.Policy)
	return &nbdb.LogicalRouterStaticRoute{IPPrefix: r.IPPrefix, Nexthop: r.Nexthop, Policy: &policy, ExternalIDs: r.ExternalIDs}
}
