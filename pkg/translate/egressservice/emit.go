package egressservice

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"maps"
	"net/netip"
	"slices"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The rows of one address set: its policies and, on the gateway path, its
// NAT rows; and the names and formats they share.

// setPolicies are a set's reroute (or drop) policy and its two allow
// policies.
func setPolicies(cfg translate.Config, k setKey, set string, nexthop netip.Addr) []translate.Policy {
	src := fmt.Sprintf("%s.src == $%s", k.family.OVNMatch(), set)
	main := translate.Policy{Router: translate.ClusterRouter, Priority: cfg.ReroutePriority, Match: src, Action: translate.ActionReroute,
		Nexthops: []string{nexthop.String()}, ExternalIDs: translate.OwnerIDs(k.owner, k.node, k.family, translate.ActionReroute)}
	if k.owner == translate.OwnerUnassigned {
		main = translate.Policy{Router: translate.ClusterRouter, Priority: cfg.ReroutePriority, Match: src, Action: translate.ActionDrop,
			ExternalIDs: translate.OwnerIDs(k.owner, k.node, k.family, translate.ActionDrop)}
	}
	return []translate.Policy{main, {Router: translate.ClusterRouter, Priority: cfg.AllowPriority,
		Match: src + " && " + translate.AllowDestinations(cfg, k.family), Action: translate.ActionAllow,
		ExternalIDs: translate.OwnerIDs(k.owner, k.node, k.family, translate.ActionAllow)},
		{Router: translate.ClusterRouter, Priority: cfg.AllowPriority,
			Match:  fmt.Sprintf("%s && %s.dst == $%s", src, k.family.OVNMatch(), translate.NodeIPsSetName(k.family)),
			Action: translate.ActionAllow, Options: map[string]string{"pkt_mark": translate.PodToNodeMark},
			ExternalIDs: translate.OwnerIDs(k.owner, k.node, k.family, translate.ActionAllowNode)}}
}

// matchNATs renders the gateway path's NAT rows on an NB with NAT.match
// (OVN ≥ 24.09), as measured against one row per endpoint
// (docs/performance.md): per service of the set, an address set of its
// endpoints and one snat row matching it, so that an endpoint change writes
// an address set and no NAT row; and one row that gives the set's traffic to
// node addresses the GR's own SNAT, so that a pod on the host node reaches
// other nodes with its node's address, as it would without ovn-egress. Every
// match is positive (no negation: ovn-controller expands those into cross
// products of flows).
func matchNATs(k setKey, set string, parts map[string]*contribution) (nats []translate.NAT, sets []translate.AddressSet) {
	gr := translate.GatewayRouter(k.node)
	byService := map[string][]netip.Addr{}
	ext := map[string]netip.Addr{}
	var node translate.GatewaySNAT
	for _, c := range parts {
		for _, e := range c.nats {
			byService[e.svc] = append(byService[e.svc], e.ep)
			ext[e.svc] = e.ext
		}
		if c.nodeSNAT.ExternalIP.IsValid() {
			node = c.nodeSNAT
		}
	}
	everyone := k.family.Any().String() // the match selects; logical_ip only has to cover it
	for _, svc := range slices.Sorted(maps.Keys(byService)) {
		setIDs := translate.OwnerIDs(translate.OwnerNATSet, k.node, k.family, svc)
		setIDs[translate.KeyService] = svc
		name := NATSetName(k.node, k.family, svc)
		sets = append(sets, translate.AddressSet{Name: name, Addresses: translate.AddrStrings(byService[svc]), ExternalIDs: setIDs})
		ids := translate.OwnerIDs(translate.OwnerNAT, k.node, k.family, svc)
		ids[translate.KeyService] = svc
		nats = append(nats, translate.NAT{Router: gr, Type: "snat", ExternalIP: ext[svc].String(), LogicalIP: everyone,
			Match: fmt.Sprintf("%s.src == $%s", k.family.OVNMatch(), name), Priority: translate.NATServicePriority, ExternalIDs: ids})
	}
	if node.ExternalIP.IsValid() {
		nats = append(nats, translate.NAT{Router: gr, Type: "snat", ExternalIP: node.ExternalIP.String(), LogicalIP: everyone,
			Match:    fmt.Sprintf("%s.src == $%s && %s.dst == $%s", k.family.OVNMatch(), set, k.family.OVNMatch(), translate.NodeIPsSetName(k.family)),
			Priority: translate.NATNodePriority, ExternalPortRange: node.PortRange, ExternalIDs: translate.OwnerIDs(translate.OwnerNAT, k.node, k.family, "node-ips")})
	}
	return nats, sets
}

// NATSetName is the name of the address set of service svcKey's endpoints
// of family f that its NAT row on host's GR matches (Config.NATMatch).
func NATSetName(host string, f ipfamily.Family, svcKey string) string {
	return translate.AddressSetName(setID(translate.OwnerNATSet, host, f, svcKey))
}

func setID(owner, name string, f ipfamily.Family, extra ...string) string {
	return translate.OwnerIDs(owner, name, f, extra...)[translate.KeyID]
}

// endpointNAT is the snat row of one endpoint (one row per endpoint, OVN
// without NAT.match).
func endpointNAT(k setKey, e natEntry) translate.NAT {
	ids := translate.OwnerIDs(translate.OwnerNAT, k.node, k.family, e.ep.String())
	ids[translate.KeyService] = e.svc
	return translate.NAT{Router: translate.GatewayRouter(k.node), Type: "snat", ExternalIP: e.ext.String(), LogicalIP: e.ep.String(), ExternalIDs: ids}
}
