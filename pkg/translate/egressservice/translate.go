package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"slices"
	"strings"
)

// unassignedName is the k8s.ovn.org/name of the unassigned-traffic rows.
const unassignedName = "unassigned"

// Translate computes the desired NB rows of the whole input, and every
// EgressService's problems. It is deterministic: the same input gives the
// same rows in the same order. It is a fresh Index of the input rendered
// whole: the oracle of every incremental path.
func Translate(in translate.Input) *translate.Desired {
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
	ess := translate.SortedEgressServices(in.EgressServices)
	for _, es := range ess {
		key := translate.EgressServiceKey(es)
		x.SetService(ServiceObjects{EgressService: es, Service: in.Services[key], Slices: in.EndpointSlices[key]})
	}
	d := x.Rows(x.Keys())
	for _, es := range ess {
		d.Problems = append(d.Problems, x.Problems(translate.EgressServiceKey(es))...)
	}
	slices.SortStableFunc(d.Problems, func(a, b translate.Problem) int { return strings.Compare(a.Key, b.Key) })
	return d
}
