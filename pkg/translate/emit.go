package translate

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The rows besides the per-host reroutes: fail-closed drops, the
// interconnect cluster route, and the rendering of accumulated sets into
// Address_Set, policy and NAT rows.

// addUnassigned puts every endpoint of a LoadBalancerIP EgressService that
// is rerouted nowhere (no host, host not ready, family without ingress IP)
// into the drop sets: fail closed.
func (t *translator) addUnassigned(svcs []*service) {
	// The drop policy exists for every family even when empty, so that it
	// does not come and go with endpoints.
	drop := map[ipfamily.Family]*contribution{}
	for _, f := range t.in.Config.Families() {
		drop[f] = &contribution{set: setKey{unassignedName, OwnerUnassigned, f}}
	}
	for _, s := range svcs {
		if s.es.Spec.SourceIPBy == egressv1.Network || s.svc == nil || !IsLoadBalancer(s.svc) {
			continue
		}
		dropped := 0
		for _, e := range s.eps {
			if t.rerouted[e.IP] || !t.inZone(e.Node) {
				continue
			}
			f := ipfamily.Of(e.IP)
			if drop[f] == nil {
				drop[f] = &contribution{set: setKey{unassignedName, OwnerUnassigned, f}}
			}
			drop[f].addrs = append(drop[f].addrs, e.IP)
			dropped++
		}
		if dropped > 0 {
			t.problem(s.key, ReasonUnassignedTrafficDrop, "%d endpoint(s) have no working host; their traffic leaving the cluster is dropped (--unassigned-traffic=drop)", dropped)
		}
	}
	for _, f := range ipfamily.All {
		if c := drop[f]; c != nil {
			t.add(c, false)
		}
	}
}

// addClusterRoutes gives every host of this zone that serves a
// LoadBalancerIP service a src-ip route of the cluster subnets to its GR: in
// interconnect, pod traffic of other zones arrives over the transit switch
// and must be routed before the reroute policies see it (ovn_cluster_router
// routes, then applies policies). A route someone else already has for the
// subnet (ovn-kubernetes, with its egress features on) is left to them.
// An egress node of this zone holding an EgressIP (Input.EgressNodes) gets
// the route too: the selected pods of other zones reach its GR the same way.
// While ovn-kubernetes' EgressIP may rely on such a route
// (Input.ClusterRouteShared), a route ovn-egress no longer wants is handed
// over, never deleted; and when the route it deferred to disappears, its own
// is added again at once (someone must route that traffic).
func (t *translator) addClusterRoutes(svcs []*service) {
	if t.in.ClusterRouteShared {
		t.d.ReleaseClusterRoutes = true
	}
	hosts := map[string]bool{}
	for _, s := range svcs {
		if (s.mode == modeHost || s.mode == modeGateway) && t.inZone(s.host.Name) {
			hosts[s.host.Name] = true
		}
	}
	for n := range t.in.EgressNodes {
		if t.in.Nodes[n] != nil && t.inZone(n) {
			hosts[n] = true
		}
	}
	for host := range hosts {
		n := t.in.Nodes[host]
		for _, subnet := range t.in.Config.ClusterSubnets {
			f := ipfamily.OfPrefix(subnet)
			if t.in.ForeignClusterRoutes[subnet.Masked()] {
				continue
			}
			join, ok := n.JoinIPs[f]
			if gw, found := t.in.Gateways[host]; found && gw.JoinIPs[f].IsValid() {
				join, ok = gw.JoinIPs[f], true
			}
			if !ok {
				continue
			}
			t.rows(NodeKey(host)).Routes = append(t.rows(NodeKey(host)).Routes, StaticRoute{Router: ClusterRouter,
				IPPrefix: subnet.Masked().String(), Nexthop: join.String(), Policy: "src-ip",
				ExternalIDs: ownerIDs(OwnerClusterRoute, host, f)})
		}
	}
}

// emitSets turns every accumulated set into its Address_Set, its reroute
// (or drop) policy, its allow policy and, on the gateway path, its NAT rows.
// A set whose contributions are those of the last translation is not
// rendered again.
func (t *translator) emitSets() {
	for k, acc := range t.sets {
		key := k.key()
		if t.in.Only != nil && !t.in.Only[key] {
			continue // computed for the others' sake, not asked for
		}
		rs := t.memo.set(t, k, acc)
		r := t.rows(key)
		r.AddressSets = append(r.AddressSets, rs.set)
		r.AddressSets = append(r.AddressSets, rs.natSets...)
		r.Policies = append(r.Policies, rs.policies...)
		r.NATs = append(r.NATs, rs.nats...)
	}
}

// renderedSet is the rows of one accumulated set.
type renderedSet struct {
	set      AddressSet
	policies []Policy
	nats     []NAT
	natSets  []AddressSet // with Config.NATMatch: one per service
	// addrs are set's addresses, sorted as set.Addresses; patchable: no two
	// contributions had an address in common and there are no natSets, so
	// the next rendering may patch this one (Memo.set).
	addrs     []netip.Addr
	patchable bool
}

func (t *translator) render(k setKey, acc *setAcc) *renderedSet {
	cfg := t.in.Config
	n, nn := 0, 0
	for _, c := range acc.parts {
		n += len(c.addrs)
		nn += len(c.nats)
	}
	ips := make([]netip.Addr, 0, n)
	for _, c := range acc.parts {
		ips = append(ips, c.addrs...)
	}
	ids := ownerIDs(k.owner, k.node, k.family)
	name := AddressSetName(ids[KeyID])
	sorted := sortedAddrs(ips)
	rs := &renderedSet{set: AddressSet{Name: name, Addresses: formatAddrs(sorted), ExternalIDs: ids}, addrs: sorted}
	rs.patchable = len(sorted) == n && (nn == 0 || !cfg.NATMatch)
	src := fmt.Sprintf("%s.src == $%s", k.family.OVNMatch(), name)
	main := Policy{Router: ClusterRouter, Priority: cfg.ReroutePriority, Match: src, Action: ActionReroute,
		Nexthops: []string{acc.nexthop.String()}, ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionReroute)}
	if k.owner == OwnerUnassigned {
		main = Policy{Router: ClusterRouter, Priority: cfg.ReroutePriority, Match: src, Action: ActionDrop,
			ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionDrop)}
	}
	rs.policies = []Policy{main, {Router: ClusterRouter, Priority: cfg.AllowPriority,
		Match: src + " && " + t.allowDestinations(k.family), Action: ActionAllow,
		ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionAllow)},
		{Router: ClusterRouter, Priority: cfg.AllowPriority,
			Match:  fmt.Sprintf("%s && %s.dst == $%s", src, k.family.OVNMatch(), NodeIPsSetName(k.family)),
			Action: ActionAllow, Options: map[string]string{"pkt_mark": PodToNodeMark},
			ExternalIDs: ownerIDs(k.owner, k.node, k.family, ActionAllowNode)}}
	if nn > 0 && cfg.NATMatch {
		t.renderMatchNATs(rs, k, acc)
	} else if nn > 0 {
		nats := make(map[netip.Addr]natEntry, nn) // one row per endpoint, the last claim wins
		for _, c := range acc.parts {
			for _, e := range c.nats {
				nats[e.ep] = e
			}
		}
		for _, e := range nats {
			rs.nats = append(rs.nats, endpointNAT(k, e))
		}
	}
	return rs
}

// renderMatchNATs renders the gateway path's NAT rows on an NB with
// NAT.match (OVN ≥ 24.09), as measured against one row per endpoint
// (docs/performance.md): per service of the set, an address set of its
// endpoints and one snat row matching it, so that an endpoint change writes
// an address set and no NAT row; and one row that gives the set's traffic to
// node addresses the GR's own SNAT, so that a pod on the host node reaches
// other nodes with its node's address, as it would without ovn-egress. Every
// match is positive (no negation: ovn-controller expands those into cross
// products of flows).
func (t *translator) renderMatchNATs(rs *renderedSet, k setKey, acc *setAcc) {
	gr := GatewayRouter(k.node)
	byService := map[string][]netip.Addr{}
	ext := map[string]netip.Addr{}
	var node GatewaySNAT
	for _, c := range acc.parts {
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
		set := NATSetName(k.node, k.family, svc)
		rs.natSets = append(rs.natSets, AddressSet{Name: set, Addresses: addrStrings(byService[svc]), ExternalIDs: setIDs})
		ids := ownerIDs(OwnerNAT, k.node, k.family, svc)
		ids[KeyService] = svc
		rs.nats = append(rs.nats, NAT{Router: gr, Type: "snat", ExternalIP: ext[svc].String(), LogicalIP: everyone,
			Match: fmt.Sprintf("%s.src == $%s", k.family.OVNMatch(), set), Priority: NATServicePriority, ExternalIDs: ids})
	}
	if node.ExternalIP.IsValid() {
		rs.nats = append(rs.nats, NAT{Router: gr, Type: "snat", ExternalIP: node.ExternalIP.String(), LogicalIP: everyone,
			Match:    fmt.Sprintf("%s.src == $%s && %s.dst == $%s", k.family.OVNMatch(), rs.set.Name, k.family.OVNMatch(), NodeIPsSetName(k.family)),
			Priority: NATNodePriority, ExternalPortRange: node.PortRange, ExternalIDs: ownerIDs(OwnerNAT, k.node, k.family, "node-ips")})
	}
}

// NATSetName is the name of the address set of service svcKey's endpoints
// of family f that its NAT row on host's GR matches (Config.NATMatch).
func NATSetName(host string, f ipfamily.Family, svcKey string) string {
	return AddressSetName(setID(OwnerNATSet, host, f, svcKey))
}

// nodeSNAT is the SNAT a host's GR gives its node's pods in family f: the
// one NB shows on the GR, else the node's first address of the family (what
// ovn-kubernetes' shared gateway mode SNATs to).
func (t *translator) nodeSNAT(n *NodeInfo, f ipfamily.Family) GatewaySNAT {
	if gw, ok := t.in.Gateways[n.Name]; ok {
		if s, ok := gw.SNAT[f]; ok {
			return s
		}
	}
	for _, ip := range n.HostIPs {
		if ipfamily.Of(ip) == f {
			return GatewaySNAT{ExternalIP: ip}
		}
	}
	return GatewaySNAT{}
}

// allowDestinations is the destination half of the first allow policy: the
// cluster, join and service networks of the family. Node addresses have an
// allow policy of their own, which marks the packets as ovn-kubernetes'
// Pod-To-Node policy does (PodToNodeMark): whichever of the two equal-priority
// rows OVN picks, the result is the same. Written positively: a negation (!=)
// in a match explodes into a cross product of OpenFlow flows in
// ovn-controller.
func (t *translator) allowDestinations(f ipfamily.Family) string {
	return allowDestinations(t.in.Config, f)
}

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

// emitNodeIPs writes the cluster-wide node-IP sets, one per family.
func (t *translator) emitNodeIPs() {
	if t.in.Only != nil && !t.in.Only[ClusterKey] {
		return
	}
	r := t.rows(ClusterKey)
	for _, f := range t.in.Config.Families() {
		var addrs []netip.Addr
		for _, n := range t.in.Nodes {
			for _, ip := range n.HostIPs {
				if ipfamily.Of(ip) == f {
					addrs = append(addrs, ip)
				}
			}
		}
		ids := ownerIDs(OwnerNodeIPs, "node-ips", f)
		r.AddressSets = append(r.AddressSets, AddressSet{Name: AddressSetName(ids[KeyID]), Addresses: addrStrings(addrs), ExternalIDs: ids})
	}
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
