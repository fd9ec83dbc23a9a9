package ovn

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Gateways reads the GR facts translation needs for each node from the NB
// cache: the join addresses of rtoj-GR_<node>, whether etor-GR_<node>
// announces NAT addresses, and the GR's own SNAT of the cluster subnets.
// Nodes without a GR in NB are left out.
func Gateways(ctx context.Context, c client.Client, nodes []string, clusterSubnets []netip.Prefix) map[string]translate.GatewayInfo {
	out := map[string]translate.GatewayInfo{}
	for _, node := range nodes {
		gr := translate.GatewayRouter(node)
		gw := translate.GatewayInfo{JoinIPs: map[ipfamily.Family]netip.Addr{}, SNAT: gatewaySNAT(ctx, c, gr, clusterSubnets)}
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

// gatewaySNAT finds, per family, the snat row on router gr that ovn-egress
// does not own and whose logical_ip is one of the cluster subnets: the
// address ovn-kubernetes gives the node's pods (nil when there is none).
func gatewaySNAT(ctx context.Context, c client.Client, gr string, clusterSubnets []netip.Prefix) map[ipfamily.Family]translate.GatewaySNAT {
	lr := &nbdb.LogicalRouter{Name: gr}
	if err := c.Get(ctx, lr); err != nil {
		return nil
	}
	var out map[ipfamily.Family]translate.GatewaySNAT
	for _, u := range lr.Nat {
		r, err := getNAT(ctx, c, u)
		if err != nil || r.Type != string(nbdb.NATTypeSNAT) || r.Match != "" {
			continue
		}
		if _, owned := translate.KeyOf(r.ExternalIDs); owned {
			continue
		}
		p, err1 := netip.ParsePrefix(r.LogicalIP)
		ext, err2 := netip.ParseAddr(r.ExternalIP)
		if err1 != nil || err2 != nil || !slices.ContainsFunc(clusterSubnets, func(s netip.Prefix) bool { return s.Masked() == p.Masked() }) {
			continue
		}
		f := ipfamily.OfPrefix(p)
		if _, seen := out[f]; seen {
			continue
		}
		if out == nil {
			out = map[ipfamily.Family]translate.GatewaySNAT{}
		}
		out[f] = translate.GatewaySNAT{ExternalIP: ipfamily.Canonical(ext), PortRange: r.ExternalPortRange}
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
