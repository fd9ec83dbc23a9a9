package translate

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The rows of one address set: its policies and, on the gateway path, its
// NAT rows; and the names and formats they share.

// setPolicies are a set's reroute (or drop) policy and its two allow
// policies.
func setPolicies(cfg Config, k setKey, set string, nexthop netip.Addr) []Policy {
	src := fmt.Sprintf("%s.src == $%s", k.family.OVNMatch(), set)
	main := Policy{Router: ClusterRouter, Priority: cfg.ReroutePriority, Match: src, Action: ActionReroute,
		Nexthops: []string{nexthop.String()}, ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionReroute)}
	if k.owner == OwnerUnassigned {
		main = Policy{Router: ClusterRouter, Priority: cfg.ReroutePriority, Match: src, Action: ActionDrop,
			ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionDrop)}
	}
	return []Policy{main, {Router: ClusterRouter, Priority: cfg.AllowPriority,
		Match: src + " && " + allowDestinations(cfg, k.family), Action: ActionAllow,
		ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionAllow)},
		{Router: ClusterRouter, Priority: cfg.AllowPriority,
			Match:  fmt.Sprintf("%s && %s.dst == $%s", src, k.family.OVNMatch(), NodeIPsSetName(k.family)),
			Action: ActionAllow, Options: map[string]string{"pkt_mark": PodToNodeMark},
			ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionAllowNode)}}
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
func matchNATs(k setKey, set string, parts map[string]*contribution) (nats []NAT, sets []AddressSet) {
	gr := GatewayRouter(k.node)
	byService := map[string][]netip.Addr{}
	ext := map[string]netip.Addr{}
	var node GatewaySNAT
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
		setIDs := ownerIDs(OwnerNATSet, k.node, k.family, svc)
		setIDs[KeyService] = svc
		name := NATSetName(k.node, k.family, svc)
		sets = append(sets, AddressSet{Name: name, Addresses: addrStrings(byService[svc]), ExternalIDs: setIDs})
		ids := ownerIDs(OwnerNAT, k.node, k.family, svc)
		ids[KeyService] = svc
		nats = append(nats, NAT{Router: gr, Type: "snat", ExternalIP: ext[svc].String(), LogicalIP: everyone,
			Match: fmt.Sprintf("%s.src == $%s", k.family.OVNMatch(), name), Priority: NATServicePriority, ExternalIDs: ids})
	}
	if node.ExternalIP.IsValid() {
		nats = append(nats, NAT{Router: gr, Type: "snat", ExternalIP: node.ExternalIP.String(), LogicalIP: everyone,
			Match:    fmt.Sprintf("%s.src == $%s && %s.dst == $%s", k.family.OVNMatch(), set, k.family.OVNMatch(), NodeIPsSetName(k.family)),
			Priority: NATNodePriority, ExternalPortRange: node.PortRange, ExternalIDs: ownerIDs(OwnerNAT, k.node, k.family, "node-ips")})
	}
	return nats, sets
}

// NATSetName is the name of the address set of service svcKey's endpoints
// of family f that its NAT row on host's GR matches (Config.NATMatch).
func NATSetName(host string, f ipfamily.Family, svcKey string) string {
	return AddressSetName(setID(OwnerNATSet, host, f, svcKey))
}

// allowDestinations is the destination half of the first allow policy: the
// cluster, join and service networks of the family. Node addresses have an
// allow policy of their own, which marks the packets as ovn-kubernetes'
// Pod-To-Node policy does (PodToNodeMark): whichever of the two equal-priority
// rows OVN picks, the result is the same. Written positively: a negation (!=)
// in a match explodes into a cross product of OpenFlow flows in
// ovn-controller.
func allowDestinations(cfg Config, f ipfamily.Family) string {
	var parts []string
	for _, ps := range [][]netip.Prefix{cfg.ClusterSubnets, cfg.JoinSubnets, cfg.ServiceCIDRs} {
		for _, p := range ps {
			if ipfamily.OfPrefix(p) == f {
				parts = append(parts, p.Masked().String())
			}
		}
	}
	if len(parts) == 1 {
		return fmt.Sprintf("%s.dst == %s", f.OVNMatch(), parts[0])
	}
	return fmt.Sprintf("%s.dst == {%s}", f.OVNMatch(), strings.Join(parts, ", "))
}

// NodeIPsSetName is the name of the cluster-wide node-IP address set of a family.
func NodeIPsSetName(f ipfamily.Family) string {
	return AddressSetName(setID(OwnerNodeIPs, "node-ips", f))
}

func setID(owner, name string, f ipfamily.Family, extra ...string) string {
	return ownerIDs(owner, name, f, extra...)[KeyID]
}

// endpointNAT is the snat row of one endpoint (one row per endpoint, OVN
// without NAT.match).
func endpointNAT(k setKey, e natEntry) NAT {
	ids := ownerIDs(OwnerNAT, k.node, k.family, e.ep.String())
	ids[KeyService] = e.svc
	return NAT{Router: GatewayRouter(k.node), Type: "snat", ExternalIP: e.ext.String(), LogicalIP: e.ep.String(), ExternalIDs: ids}
}

// addrStrings sorts the addresses (in place), drops duplicates and
// formats them.
func addrStrings(ips []netip.Addr) []string { return formatAddrs(sortedAddrs(ips)) }

// sortedAddrs sorts the addresses in place and drops duplicates.
func sortedAddrs(ips []netip.Addr) []netip.Addr {
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(ips)
}

func formatAddrs(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}
