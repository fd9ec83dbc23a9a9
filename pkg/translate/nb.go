package translate

import (
	"slices"
	"strings"
)

// UnassignedKey holds the drop rows of --unassigned-traffic=drop.
const UnassignedKey Key = "unassigned"

// unassignedName is the k8s.ovn.org/name of the unassigned-traffic rows.
const unassignedName = "unassigned"

// Desired is the outcome of a translation: the rows per key and the problems.
type Desired struct {
	Rows     map[Key]*Rows
	Problems Problems
	// ReleaseClusterRoutes: owned cluster routes nobody wants any more are
	// handed over (their ovn-egress external_ids removed), not deleted:
	// ovn-kubernetes relies on them (Input.ClusterRouteShared).
	ReleaseClusterRoutes bool
}

// Keys returns the keys that have rows, sorted.
func (d *Desired) Keys() []Key {
	out := make([]Key, 0, len(d.Rows))
	for k := range d.Rows {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Count returns the number of rows per table name.
func (d *Desired) Count() (addressSets, policies, nats, addresses int) {
	for _, r := range d.Rows {
		addressSets += len(r.AddressSets)
		policies += len(r.Policies)
		nats += len(r.NATs)
		for _, as := range r.AddressSets {
			addresses += len(as.Addresses)
		}
	}
	return
}

// Translate computes the desired NB rows of the whole input, and every
// EgressService's problems. It is deterministic: the same input gives the
// same rows in the same order. It is a fresh Index of the input rendered
// whole: the oracle of every incremental path.
func Translate(in Input) *Desired {
	x := NewIndex(in.Config, in.Zone, MembersMap(in.Current))
	for name, n := range in.Nodes {
		x.SetNode(name, n)
	}
	for name, gw := range in.Gateways {
		x.SetGateway(name, gw, true)
	}
	if in.Zone != "" {
		x.SetZoneFacts(ZoneFacts{ForeignClusterRoutes: in.ForeignClusterRoutes, ClusterRouteShared: in.ClusterRouteShared, EgressNodes: in.EgressNodes})
	}
	ess := sortedEgressServices(in.EgressServices)
	for _, es := range ess {
		key := EgressServiceKey(es)
		x.SetService(ServiceObjects{EgressService: es, Service: in.Services[key], Slices: in.EndpointSlices[key]})
	}
	d := x.Rows(x.Keys())
	for _, es := range ess {
		d.Problems = append(d.Problems, x.Problems(EgressServiceKey(es))...)
	}
	slices.SortStableFunc(d.Problems, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) })
	return d
}
