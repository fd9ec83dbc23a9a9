package ovn

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Leftover is one NB row ovn-kubernetes' own egress-service feature left
// behind, provably its: a reroute policy carrying its EgressSVC external id,
// or one of its egresssvc-served-pods address sets (owner
// default-network-controller) with addresses in it.
type Leftover struct {
	Table  string
	UUID   string
	Router string // for a policy: the router that references it ("" none)
	// What describes the row for people.
	What string
	// Addresses are a served-pods set's addresses (emptied, the set kept:
	// ovn-kubernetes' EgressIP Pod-To-Node policy references it).
	Addresses []string
}

func (l Leftover) String() string {
	if l.Table == nbdb.AddressSetTable {
		return fmt.Sprintf("%s %s: %s (%d addresses emptied; the set is kept)", l.Table, l.UUID, l.What, len(l.Addresses))
	}
	on := ""
	if l.Router != "" {
		on = " on " + l.Router
	}
	return fmt.Sprintf("%s %s%s: %s", l.Table, l.UUID, on, l.What)
}

// Leftovers lists, from the cache, what ovn-kubernetes' built-in features
// left in this NB: its EgressSVC policies (at any priority), the addresses
// of its served-pods sets, and its EgressIP no-reroute policies while its
// EgressIP serves no pod. Nothing else: rows are matched by the marks only
// ovn-kubernetes' own controllers write.
func Leftovers(ctx context.Context, c client.Client) ([]Leftover, error) {
	var out []Leftover
	var pols []nbdb.LogicalRouterPolicy
	err := c.WhereCache(func(p *nbdb.LogicalRouterPolicy) bool {
		_, ok := p.ExternalIDs[EgressSVCKey]
		_, ours := translate.KeyOf(p.ExternalIDs)
		return ok && !ours
	}).List(ctx, &pols)
	if err != nil && err != client.ErrNotFound {
		return nil, fmt.Errorf("list EgressSVC policies: %w", err)
	}
	refs := &routerRefs{ctx: ctx, c: c}
	for _, p := range pols {
		out = append(out, Leftover{Table: nbdb.LogicalRouterPolicyTable, UUID: p.UUID, Router: refs.router(p.UUID),
			What: fmt.Sprintf("%d %s %s %s (EgressSVC=%s)", p.Priority, p.Match, p.Action, strings.Join(p.Nexthops, ","), p.ExternalIDs[EgressSVCKey])})
	}
	if refs.err != nil {
		return nil, refs.err
	}
	var sets []nbdb.AddressSet
	err = c.WhereCache(func(s *nbdb.AddressSet) bool {
		return s.ExternalIDs[translate.KeyName] == EgressSVCServedPods && s.ExternalIDs[translate.KeyOwnerController] == ovnKubeControllerName &&
			len(s.Addresses) > 0
	}).List(ctx, &sets)
	if err != nil && err != client.ErrNotFound {
		return nil, fmt.Errorf("list %s: %w", EgressSVCServedPods, err)
	}
	for _, s := range sets {
		out = append(out, Leftover{Table: nbdb.AddressSetTable, UUID: s.UUID, What: fmt.Sprintf("%s %s (%s)", EgressSVCServedPods, s.ExternalIDs["ip-family"], s.Name),
			Addresses: slices.Clone(s.Addresses)})
	}
	// ovn-kubernetes' EgressIP no-reroute policies, when its EgressIP serves
	// nobody here: its egress-service feature writes them too and leaves
	// them when turned off, and while they stay, ovn-egress treats the
	// zone's cluster route as ovn-kubernetes' (Input.ClusterRouteShared).
	// With its EgressIP on and serving, they are its and stay.
	serving, err := OVNKubeEgressIPServing(ctx, c)
	if err != nil {
		return nil, err
	}
	if serving == 0 {
		for _, p := range OVNKubeNoReroutePolicies(c) {
			out = append(out, Leftover{Table: nbdb.LogicalRouterPolicyTable, UUID: p.UUID, Router: refs.router(p.UUID),
				What: fmt.Sprintf("%d %s %s (%s, ovn-kubernetes' EgressIP serves no pod here)", p.Priority, p.Match, p.Action, p.ExternalIDs[translate.KeyName])})
		}
		if refs.err != nil {
			return nil, refs.err
		}
	}
	slices.SortFunc(out, func(a, b Leftover) int { return strings.Compare(a.Table+a.What, b.Table+b.What) })
	return out, nil
}

// RemoveLeftovers deletes the leftover policies (detached from their
// routers) and empties the leftover sets, in one transaction, each
// operation checked: a row gone since it was listed fails the whole
// transaction.
func RemoveLeftovers(ctx context.Context, c client.Client, ls []Leftover) error {
	var ops []ovsdb.Operation
	for _, l := range ls {
		switch l.Table {
		case nbdb.LogicalRouterPolicyTable:
			if l.Router != "" {
				o, err := routerMutation(c, l.Router, "policies", ovsdb.MutateOperationDelete, []string{l.UUID})
				if err != nil {
					return err
				}
				ops = append(ops, o...)
			}
			o, err := c.Where(&nbdb.LogicalRouterPolicy{UUID: l.UUID}).Delete()
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		case nbdb.AddressSetTable:
			as := &nbdb.AddressSet{UUID: l.UUID}
			o, err := c.Where(as).Mutate(as, model.Mutation{Field: &as.Addresses, Mutator: ovsdb.MutateOperationDelete, Value: l.Addresses})
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	res, err := c.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("remove leftovers (%d operations): %w", len(ops), err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("remove leftovers (%d operations): %w", len(ops), err)
	}
	for i, op := range ops {
		if op.Op != ovsdb.OperationInsert && res[i].Count != 1 {
			return fmt.Errorf("remove leftovers: operation %d (%s %s) matched %d rows, want 1", i, op.Op, op.Table, res[i].Count)
		}
	}
	return nil
}
