package ovn

import (
	"context"

	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Facts fills in what translation reads from NB, from the client's cache —
// one reader for the master's controller, `translate --nb-address` and
// `verify`: whether the NB has NAT.match; the members of the keys' owned
// address sets as NB has them (the readiness handshake keeps them while an
// agent catches up); on the gateway backend the GR facts of hosts (join
// addresses, NAT announcement, the GR's own SNAT); in a zone, the cluster
// subnets that already have someone else's src-ip route, and whether
// ovn-kubernetes' EgressIP relies on that route.
func Facts(ctx context.Context, c client.Client, in *translate.Input, keys []translate.Key, hosts []string) error {
	in.Config.NATMatch = FeaturesOf(c).NATMatch
	if in.Current == nil {
		in.Current = map[string][]string{}
	}
	if err := CurrentMembers(ctx, c, keys, in.Current); err != nil {
		return err
	}
	if in.Config.Backend == translate.BackendOVN {
		in.Gateways = Gateways(ctx, c, hosts, in.Config.ClusterSubnets)
	}
	if in.Zone == "" {
		return nil
	}
	var err error
	if in.ForeignClusterRoutes, err = ForeignClusterRoutes(ctx, c, in.Config.ClusterSubnets); err != nil {
		return err
	}
	in.ClusterRouteShared, err = OVNKubeEgressIPActive(ctx, c)
	return err
}
