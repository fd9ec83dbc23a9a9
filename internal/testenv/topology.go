package testenv

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// Topology describes an ovn-kubernetes-like NB topology: ovn_cluster_router
// with one rtos-<node> port per node switch, the join switch, and per node a
// gateway router GR_<node> bound to a chassis, with an external port and
// switch, default routes and the default SNAT of the cluster subnets.
type Topology struct {
	Families       []ipfamily.Family
	ClusterSubnets []netip.Prefix
	JoinSubnets    []netip.Prefix
	// ClusterRouterJoinIPs are ovn_cluster_router's addresses on the join switch.
	ClusterRouterJoinIPs []netip.Prefix
	// ExternalGateways are the default-route next hops of the GRs.
	ExternalGateways []netip.Addr
	// Chassis, when set, binds every GR to this one chassis (a dataplane on
	// one machine); otherwise GR_<node> is bound to chassis-<node>.
	Chassis string
	// Interconnect makes every node its own zone (k8s.ovn.org/zone-name =
	// its name) with an address on the transit switch: build each zone's NB
	// with ZoneNBCtlCommands.
	Interconnect bool
	// DynamicNeighbours sets ovn-kubernetes' gateway-router options
	// dynamic_neigh_routers=true and always_learn_from_arp_request=false:
	// a GR then learns its join-switch neighbours by ARP instead of northd
	// writing every other GR's address into every GR (flows growing with the
	// square of the nodes: ovn-northd took 5.7 GiB and still grew at 5,000
	// nodes without it). nb-shapes.md records ovn-kubernetes setting both.
	DynamicNeighbours bool
	Nodes             []TopologyNode
}

// TopologyNode is one node of a Topology.
type TopologyNode struct {
	Name string
	// GatewayMode is ovn-kubernetes' gateway mode of the node: "shared"
	// (the default when empty) or "local".
	GatewayMode string
	// ID is the ovn-kubernetes node id (k8s.ovn.org/node-id).
	ID          int
	Subnets     []netip.Prefix // pod subnets, one per family
	JoinIPs     []netip.Prefix // GR_<node>'s join address, with the join prefix length
	ExternalIPs []netip.Prefix // GR_<node>'s external address
	// HostIPs are the node's own addresses on the external network (in
	// ovn-kubernetes they equal the GR's; a dataplane on one machine gives
	// the host namespace its own).
	HostIPs []netip.Prefix
	// TransitIPs are ovn_cluster_router's addresses on the transit switch
	// (interconnect): 100.88.0.i+1/16, fd97::i+1/64.
	TransitIPs []netip.Prefix
}

// MgmtIPs returns the node's management-port addresses (the .2 of each subnet).
func (n TopologyNode) MgmtIPs() []netip.Addr {
	var out []netip.Addr
	for _, s := range n.Subnets {
		out = append(out, ipfamily.Nth(s, 2))
	}
	return out
}

// PodIP returns the address k after the network address of the node's subnet
// of family f (k >= 3 stays clear of the router and management addresses).
func (n TopologyNode) PodIP(f ipfamily.Family, k int) netip.Addr {
	for _, s := range n.Subnets {
		if ipfamily.OfPrefix(s) == f {
			return ipfamily.Nth(s, k)
		}
	}
	panic(fmt.Sprintf("node %s has no %s subnet", n.Name, f))
}

// DefaultTopology returns n nodes named node1..nodeN with kind-like addressing:
// cluster 10.244.0.0/16 and fd00:10:244::/48 (node i: 10.244.i.0/24,
// fd00:10:244:i::/64), join 100.64.0.0/16 and fd98::/64 (GR join .i+1),
// external 172.18.0.0/16 and fc00:f853:ccd:e793::/64 (GR .i+1, gateway .1).
func DefaultTopology(n int, families ...ipfamily.Family) Topology {
	if len(families) == 0 {
		families = []ipfamily.Family{ipfamily.V4}
	}
	t := Topology{Families: families}
	for _, f := range families {
		if f == ipfamily.V4 {
			t.ClusterSubnets = append(t.ClusterSubnets, netip.MustParsePrefix("10.244.0.0/16"))
			t.JoinSubnets = append(t.JoinSubnets, netip.MustParsePrefix("100.64.0.0/16"))
			t.ClusterRouterJoinIPs = append(t.ClusterRouterJoinIPs, netip.MustParsePrefix("100.64.0.1/16"))
			t.ExternalGateways = append(t.ExternalGateways, netip.MustParseAddr("172.18.0.1"))
		} else {
			t.ClusterSubnets = append(t.ClusterSubnets, netip.MustParsePrefix("fd00:10:244::/48"))
			t.JoinSubnets = append(t.JoinSubnets, netip.MustParsePrefix("fd98::/64"))
			t.ClusterRouterJoinIPs = append(t.ClusterRouterJoinIPs, netip.MustParsePrefix("fd98::1/64"))
			t.ExternalGateways = append(t.ExternalGateways, netip.MustParseAddr("fc00:f853:ccd:e793::1"))
		}
	}
	for i := 1; i <= n; i++ {
		node := TopologyNode{Name: fmt.Sprintf("node%d", i), ID: i + 1}
		for _, f := range families {
			if f == ipfamily.V4 {
				node.Subnets = append(node.Subnets, netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)))
				node.JoinIPs = append(node.JoinIPs, netip.MustParsePrefix(fmt.Sprintf("100.64.0.%d/16", i+1)))
				node.ExternalIPs = append(node.ExternalIPs, netip.MustParsePrefix(fmt.Sprintf("172.18.0.%d/16", i+1)))
				node.HostIPs = append(node.HostIPs, netip.MustParsePrefix(fmt.Sprintf("172.18.0.%d/16", 10+i)))
				node.TransitIPs = append(node.TransitIPs, netip.MustParsePrefix(fmt.Sprintf("100.88.0.%d/16", i+1)))
			} else {
				node.Subnets = append(node.Subnets, netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%x::/64", i)))
				node.JoinIPs = append(node.JoinIPs, netip.MustParsePrefix(fmt.Sprintf("fd98::%x/64", i+1)))
				node.ExternalIPs = append(node.ExternalIPs, netip.MustParsePrefix(fmt.Sprintf("fc00:f853:ccd:e793::%x/64", i+1)))
				node.HostIPs = append(node.HostIPs, netip.MustParsePrefix(fmt.Sprintf("fc00:f853:ccd:e793::%x/64", 0x10+i)))
				node.TransitIPs = append(node.TransitIPs, netip.MustParsePrefix(fmt.Sprintf("fd97::%x/64", i+1)))
			}
		}
		t.Nodes = append(t.Nodes, node)
	}
	return t
}

// Node returns the node called name.
func (t Topology) Node(name string) TopologyNode {
	for _, n := range t.Nodes {
		if n.Name == name {
			return n
		}
	}
	panic("no node " + name)
}

// MAC derives an ovn-kubernetes style MAC (0a:58 + the low 4 bytes) from an address.
func MAC(a netip.Addr) string {
	b := a.As16()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", b[12], b[13], b[14], b[15])
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// NBCtlCommands returns the topology as one chained ovn-nbctl argument list.
func (t Topology) NBCtlCommands() []string { return t.commands("") }

// ZoneNBCtlCommands returns the NB of one interconnect zone (the node
// local): its node switch, GR and ovn_cluster_router, plus the transit
// switch with a router port for the local node and remote ports (and
// routes) for every other node.
func (t Topology) ZoneNBCtlCommands(local string) []string { return t.commands(local) }

// commands renders the whole topology (zone "") or one zone's.
func (t Topology) commands(zone string) []string {
	var args []string
	cmd := func(a ...string) { args = append(args, "--"); args = append(args, a...) }
	routerLSP := func(sw, lsp, rp string, opts ...string) {
		cmd("lsp-add", sw, lsp)
		cmd("lsp-set-type", lsp, "router")
		cmd("lsp-set-addresses", lsp, "router")
		cmd(append([]string{"lsp-set-options", lsp, "router-port=" + rp}, opts...)...)
	}
	cmd("lr-add", "ovn_cluster_router")
	cmd(append([]string{"lrp-add", "ovn_cluster_router", "rtoj-ovn_cluster_router", MAC(t.ClusterRouterJoinIPs[0].Addr())}, prefixStrings(t.ClusterRouterJoinIPs)...)...)
	cmd("ls-add", "join")
	routerLSP("join", "jtor-ovn_cluster_router", "rtoj-ovn_cluster_router")
	if zone != "" {
		cmd("ls-add", "transit_switch")
	}
	for _, n := range t.Nodes {
		if zone != "" && n.Name != zone {
			// A remote node: reached over the transit switch.
			lsp := "tstor-" + n.Name
			addrs := []string{MAC(n.TransitIPs[0].Addr())}
			for _, p := range n.TransitIPs {
				addrs = append(addrs, p.String())
			}
			cmd("lsp-add", "transit_switch", lsp)
			cmd("lsp-set-type", lsp, "remote")
			cmd("lsp-set-addresses", lsp, strings.Join(addrs, " "))
			cmd("lsp-set-options", lsp, "requested-chassis=chassis-"+n.Name)
			for i, s := range n.Subnets {
				cmd("lr-route-add", "ovn_cluster_router", s.String(), n.TransitIPs[i].Addr().String())
			}
			continue
		}
		if zone != "" {
			cmd(append([]string{"lrp-add", "ovn_cluster_router", "rtots-" + n.Name, MAC(n.TransitIPs[0].Addr())}, prefixStrings(n.TransitIPs)...)...)
			routerLSP("transit_switch", "tstor-"+n.Name, "rtots-"+n.Name)
		}
		var rtos []string
		mgmt := []string{MAC(n.MgmtIPs()[0])}
		for _, s := range n.Subnets {
			rtos = append(rtos, netip.PrefixFrom(ipfamily.Nth(s, 1), s.Bits()).String())
			mgmt = append(mgmt, ipfamily.Nth(s, 2).String())
		}
		cmd("ls-add", n.Name)
		cmd(append([]string{"lrp-add", "ovn_cluster_router", "rtos-" + n.Name, MAC(ipfamily.Nth(n.Subnets[0], 1))}, rtos...)...)
		routerLSP(n.Name, "stor-"+n.Name, "rtos-"+n.Name)
		cmd("lsp-add", n.Name, "k8s-"+n.Name)
		cmd("lsp-set-addresses", "k8s-"+n.Name, strings.Join(mgmt, " "))

		gr := "GR_" + n.Name
		cmd("lr-add", gr)
		chassis := t.Chassis
		if chassis == "" {
			chassis = "chassis-" + n.Name
		}
		cmd("set", "Logical_Router", gr, "options:chassis="+chassis)
		if t.DynamicNeighbours {
			cmd("set", "Logical_Router", gr, "options:dynamic_neigh_routers=true", "options:always_learn_from_arp_request=false")
		}
		cmd(append([]string{"lrp-add", gr, "rtoj-" + gr, MAC(n.JoinIPs[0].Addr())}, prefixStrings(n.JoinIPs)...)...)
		routerLSP("join", "jtor-"+gr, "rtoj-"+gr)
		cmd(append([]string{"lrp-add", gr, "rtoe-" + gr, MAC(n.ExternalIPs[0].Addr())}, prefixStrings(n.ExternalIPs)...)...)
		ext := "ext_" + n.Name
		cmd("ls-add", ext)
		routerLSP(ext, "etor-"+gr, "rtoe-"+gr, "nat-addresses=router")
		cmd("lsp-add", ext, "breth0_"+n.Name)
		cmd("lsp-set-type", "breth0_"+n.Name, "localnet")
		cmd("lsp-set-addresses", "breth0_"+n.Name, "unknown")
		cmd("lsp-set-options", "breth0_"+n.Name, "network_name=physnet")
		for i, f := range t.Families {
			join := n.JoinIPs[i].Addr()
			// Pod egress: to the GR (shared gateway mode) or to the node's
			// management port, where the host masquerades it (local gateway
			// mode; reference: ovn-kubernetes-local-gateway.md §1a).
			egress := join.String()
			if n.GatewayMode == "local" {
				egress = n.MgmtIPs()[i].String()
			}
			cmd("--policy=src-ip", "lr-route-add", "ovn_cluster_router", n.Subnets[i].String(), egress)
			// Return traffic to a GR goes back to the same GR (ovn-kubernetes'
			// dst route of the GR's join address, both gateway modes).
			cmd("lr-route-add", "ovn_cluster_router", netip.PrefixFrom(join, join.BitLen()).String(), join.String())
			cmd("lr-route-add", gr, t.ClusterSubnets[i].String(), t.ClusterRouterJoinIPs[i].Addr().String())
			cmd("lr-route-add", gr, f.Any().String(), t.ExternalGateways[i].String(), "rtoe-"+gr)
			// The GR's SNAT of the cluster subnet and of its own join address
			// to the node's address, with ovn-kubernetes' port range.
			ext := n.ExternalIPs[i].Addr().String()
			cmd("--portrange", "lr-nat-add", gr, "snat", ext, t.ClusterSubnets[i].String(), NATPortRange)
			cmd("--portrange", "lr-nat-add", gr, "snat", ext, join.String(), NATPortRange)
			// The 1004 policy: traffic from the node's pods to the node's own
			// addresses goes to its management port (the host's addresses:
			// in this topology the GR's external address is its own, where
			// ovn-kubernetes' shared gateway shares it with the host).
			for _, hp := range n.HostIPs {
				if ipfamily.OfPrefix(hp) != f {
					continue
				}
				cmd("lr-policy-add", "ovn_cluster_router", "1004",
					fmt.Sprintf(`inport == "rtos-%s" && %s.dst == %s /* %s */`, n.Name, f.OVNMatch(), hp.Addr(), n.Name),
					"reroute", n.MgmtIPs()[i].String())
			}
		}
	}
	return args[1:]
}

// NATPortRange is the external port range ovn-kubernetes gives its GR SNATs.
const NATPortRange = "32768-60999"

// BuildTopology writes the topology into NB with one ovn-nbctl call and waits
// until northd has synced it to SB.
func (o *OVN) BuildTopology(t testing.TB, topo Topology) {
	t.Helper()
	if _, err := o.NBCtl(append([]string{"--wait=sb"}, topo.NBCtlCommands()...)...); err != nil {
		t.Fatalf("build topology: %v", err)
	}
}

// AddPod attaches a logical switch port for a pod with the given addresses to
// the node's switch, named <node>_<pod>.
func (o *OVN) AddPod(t testing.TB, node, pod string, ips ...netip.Addr) string {
	t.Helper()
	lsp := node + "_" + pod
	addrs := []string{MAC(ips[0])}
	for _, ip := range ips {
		addrs = append(addrs, ip.String())
	}
	o.MustNBCtl(t, "lsp-add", node, lsp, "--", "lsp-set-addresses", lsp, strings.Join(addrs, " "))
	return lsp
}

// NodeAnnotations returns the ovn-kubernetes annotations a Node object of this
// topology carries, as current ovn-kubernetes writes them (reference:
// ovn-kubernetes-live.md): node-subnets, node-id (the GR's join address is
// derived from it: no node-gateway-router-lrp-ifaddr), host-cidrs,
// l3-gateway-config, node-primary-ifaddr, node-chassis-id and, in
// interconnect, node-transit-switch-port-ifaddr (no zone-name: every node
// is its own zone).
func (t Topology) NodeAnnotations(n TopologyNode) map[string]string {
	subnets := map[string][]string{"default": prefixStrings(n.Subnets)}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	primary := map[string]string{}
	var gwIPs, nextHops []string
	for i, p := range n.ExternalIPs {
		gwIPs = append(gwIPs, p.String())
		nextHops = append(nextHops, t.ExternalGateways[i].String())
		if ipfamily.OfPrefix(p) == ipfamily.V4 {
			primary["ipv4"] = p.String()
		} else {
			primary["ipv6"] = p.String()
		}
	}
	mode := n.GatewayMode
	if mode == "" {
		mode = "shared"
	}
	l3 := map[string]any{"default": map[string]any{"mode": mode, "bridge-id": "breth0", "interface-id": "breth0_" + n.Name,
		"mac-address": MAC(n.ExternalIPs[0].Addr()), "ip-addresses": gwIPs, "next-hops": nextHops, "node-port-enable": "true", "vlan-id": "0"}}
	ann := map[string]string{
		"k8s.ovn.org/node-subnets":        js(subnets),
		"k8s.ovn.org/node-id":             fmt.Sprint(n.ID),
		"k8s.ovn.org/host-cidrs":          js(prefixStrings(append(append([]netip.Prefix{}, n.ExternalIPs...), n.HostIPs...))),
		"k8s.ovn.org/l3-gateway-config":   js(l3),
		"k8s.ovn.org/node-primary-ifaddr": js(primary),
		"k8s.ovn.org/node-chassis-id":     "chassis-" + n.Name,
	}
	if t.Interconnect {
		ts := map[string]string{}
		for _, p := range n.TransitIPs {
			if ipfamily.OfPrefix(p) == ipfamily.V4 {
				ts["ipv4"] = p.String()
			} else {
				ts["ipv6"] = p.String()
			}
		}
		ann["k8s.ovn.org/node-transit-switch-port-ifaddr"] = js(ts)
	}
	return ann
}

// BuildZone writes one interconnect zone's NB (ZoneNBCtlCommands) and
// waits until northd has synced it.
func (o *OVN) BuildZone(t testing.TB, topo Topology, local string) {
	t.Helper()
	if _, err := o.NBCtl(append([]string{"--wait=sb"}, topo.ZoneNBCtlCommands(local)...)...); err != nil {
		t.Fatalf("build zone %s: %v", local, err)
	}
}

// NewZones starts one OVN control plane per node of an interconnect
// topology, each holding that node's zone (BuildZone), stopped when t ends.
func NewZones(t testing.TB, topo Topology) map[string]*OVN {
	t.Helper()
	zones := map[string]*OVN{}
	for _, n := range topo.Nodes {
		o := NewOVN(t)
		o.BuildZone(t, topo, n.Name)
		zones[n.Name] = o
	}
	return zones
}
