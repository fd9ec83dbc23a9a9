package ovn

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Gateways reads the GR facts translation needs for each node from the NB
// cache: the join addresses of rtoj-GR_<node> and whether etor-GR_<node>
// announces NAT addresses. Nodes without a GR in NB are left out.
func Gateways(ctx context.Context, c client.Client, nodes []string) map[string]translate.GatewayInfo {
	out := map[string]translate.GatewayInfo{}
	for _, node := range nodes {
		gr := translate.GatewayRouter(node)
		gw := translate.GatewayInfo{JoinIPs: map[ipfamily.Family]netip.Addr{}}
		lrp := &nbdb.LogicalRouterPort{Name: "rtoj-" + gr}
		if err := c.Get(ctx, lrp); err == nil {
			for _, n := range lrp.Networks {
				if p, err := netip.ParsePrefix(n); err == nil {
					gw.JoinIPs[ipfamily.OfPrefix(p)] = ipfamily.Canonical(p.Addr())
				}
			}
		}
		lsp := &nbdb.LogicalSwitchPort{Name: "etor-" + gr}
		if err := c.Get(ctx, lsp); err == nil {
			gw.ExternalPortKnown = true
			gw.NATAddressesRouter = lsp.Options["nat-addresses"] == "router"
		}
		if len(gw.JoinIPs) > 0 || gw.ExternalPortKnown {
			out[node] = gw
		}
	}
	return out
}

// CurrentMembers adds the addresses of the node keys' owned address sets,
// as the NB cache has them, to into (by address-set name): what the
// readiness handshake keeps while an agent catches up.
func CurrentMembers(ctx context.Context, c client.Client, keys []translate.Key, into map[string][]string) error {
	for _, k := range keys {
		node := k.Node()
		if node == "" || k == translate.ClusterKey || k == translate.UnassignedKey {
			continue
		}
		var sets []nbdb.AddressSet
		err := c.Where(&nbdb.AddressSet{ExternalIDs: map[string]string{translate.KeyName: node}}).List(ctx, &sets)
		if err != nil && err != client.ErrNotFound {
			return fmt.Errorf("read address sets of %s: %w", k, err)
		}
		for _, s := range sets {
			if got, ok := translate.KeyOf(s.ExternalIDs); ok && got == k {
				into[s.Name] = s.Addresses
			}
		}
	}
	return nil
}

// ForeignClusterRoutes returns the cluster subnets that already have a
// src-ip static route on ovn_cluster_router that ovn-egress does not own
// (ovn-kubernetes adds one per zone when its egress features are on).
func ForeignClusterRoutes(ctx context.Context, c client.Client, clusterSubnets []netip.Prefix) (map[netip.Prefix]bool, error) {
	var routers []nbdb.LogicalRouter
	err := c.Where(&nbdb.LogicalRouter{Name: translate.ClusterRouter}).List(ctx, &routers)
	if err != nil && err != client.ErrNotFound {
		return nil, fmt.Errorf("read %s: %w", translate.ClusterRouter, err)
	}
	out := map[netip.Prefix]bool{}
	for _, lr := range routers {
		for _, u := range lr.StaticRoutes {
			r := &nbdb.LogicalRouterStaticRoute{UUID: u}
			if err := c.Get(ctx, r); err != nil {
				continue
			}
			if _, owned := translate.KeyOf(r.ExternalIDs); owned || r.Policy == nil || *r.Policy != nbdb.LogicalRouterStaticRoutePolicySrcIP {
				continue
			}
			p, err := netip.ParsePrefix(r.IPPrefix)
			if err != nil {
				continue
			}
			for _, s := range clusterSubnets {
				if p.Masked() == s.Masked() {
					out[s.Masked()] = true
				}
			}
		}
	}
	return out, nil
}
