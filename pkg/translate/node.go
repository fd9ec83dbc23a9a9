package translate

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The ovn-kubernetes Node annotations ovn-egress reads.
const (
	AnnotNodeSubnets    = "k8s.ovn.org/node-subnets"
	AnnotGRLRPIfAddr    = "k8s.ovn.org/node-gateway-router-lrp-ifaddr"
	AnnotGRLRPIfAddrs   = "k8s.ovn.org/node-gateway-router-lrp-ifaddrs"
	AnnotNodeID         = "k8s.ovn.org/node-id"
	AnnotHostCIDRs      = "k8s.ovn.org/host-cidrs"
	AnnotL3GatewayCfg   = "k8s.ovn.org/l3-gateway-config"
	AnnotTransitIfAddr  = "k8s.ovn.org/node-transit-switch-port-ifaddr"
	AnnotZoneName       = "k8s.ovn.org/zone-name"
	AnnotPrimaryIfAddr  = "k8s.ovn.org/node-primary-ifaddr"
	defaultNetworkField = "default"
)

// NodeAnnotations are the ovn-kubernetes annotations ParseNode reads (and
// whose problems it reports).
var NodeAnnotations = []string{AnnotNodeSubnets, AnnotGRLRPIfAddr, AnnotGRLRPIfAddrs, AnnotNodeID,
	AnnotHostCIDRs, AnnotL3GatewayCfg, AnnotTransitIfAddr, AnnotZoneName, AnnotPrimaryIfAddr}

// Gateway modes of ovn-kubernetes (l3-gateway-config "mode").
const (
	GatewayModeShared = "shared"
	GatewayModeLocal  = "local"
)

// NodeInfo is what translation needs to know about one Node, parsed once.
type NodeInfo struct {
	Name   string
	Ready  bool
	Labels map[string]string
	// Subnets are the node's pod subnets (node-subnets, network "default").
	Subnets []netip.Prefix
	// MgmtIPs are the management-port (ovn-k8s-mp0) addresses: the .2 of each subnet.
	MgmtIPs map[ipfamily.Family]netip.Addr
	// JoinIPs are GR_<node>'s join-switch addresses from the annotations
	// (lrp-ifaddr, else derived from node-id within the join subnets).
	JoinIPs map[ipfamily.Family]netip.Addr
	// TransitIPs are ovn_cluster_router's transit-switch addresses (IC).
	TransitIPs map[ipfamily.Family]netip.Addr
	// HostIPs are the node's own addresses (host-cidrs, else status.addresses).
	HostIPs []netip.Addr
	// GatewayMode is "shared", "local" or "" when the annotation is absent.
	GatewayMode string
	// GatewayMAC is the gateway router's MAC (l3-gateway-config
	// "mac-address"; nil when absent or unparsable).
	GatewayMAC net.HardwareAddr
	// GatewayNextHops are the next hops of the node's gateway router
	// (l3-gateway-config "next-hops", else "next-hop"): the segment's
	// routers, never an egress source or an address to announce.
	GatewayNextHops []netip.Addr
	Zone            string
	// Report is the node agent's readiness report (nil when absent).
	Report Report
	// Problems found while parsing (bad or missing annotations).
	Problems []string
}

// ZoneName is the node's interconnect zone: k8s.ovn.org/zone-name, or the
// node's own name (current ovn-kubernetes: every node its own zone).
func (n *NodeInfo) ZoneName() string {
	if n.Zone != "" {
		return n.Zone
	}
	return n.Name
}

// Interconnect reports whether the nodes look like an ovn-kubernetes
// interconnect deployment: a transit-switch address on some node, or more
// than one zone name.
func Interconnect(nodes map[string]*NodeInfo) bool {
	zones := map[string]bool{}
	for _, n := range nodes {
		if len(n.TransitIPs) > 0 {
			return true
		}
		if n.Zone != "" {
			zones[n.Zone] = true
		}
	}
	return len(zones) > 1
}

// Zones lists the zone names of the nodes, sorted.
func Zones(nodes map[string]*NodeInfo) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range nodes {
		if z := n.ZoneName(); !seen[z] {
			seen[z] = true
			out = append(out, z)
		}
	}
	slices.Sort(out)
	return out
}

// SharedGateway reports whether the node runs ovn-kubernetes' shared gateway
// mode; a node without the annotation is taken as shared (the default).
func (n *NodeInfo) SharedGateway() bool { return n.GatewayMode != GatewayModeLocal }

// ParseNode reads a Node's readiness, labels and ovn-kubernetes annotations.
// joinSubnets are used to derive the join IPs from node-id when the
// lrp-ifaddr annotation is absent. It never fails: what cannot be parsed is
// left empty and named in Problems.
func ParseNode(n *corev1.Node, joinSubnets []netip.Prefix) *NodeInfo {
	info := &NodeInfo{
		Name: n.Name, Labels: n.Labels, Ready: NodeReady(n),
		MgmtIPs: map[ipfamily.Family]netip.Addr{}, JoinIPs: map[ipfamily.Family]netip.Addr{},
		TransitIPs: map[ipfamily.Family]netip.Addr{},
		Zone:       n.Annotations[AnnotZoneName],
	}
	a := n.Annotations
	if v, ok := a[AnnotNodeSubnets]; ok {
		subnets, err := parseNodeSubnets(v)
		if err != nil {
			info.Problems = append(info.Problems, AnnotNodeSubnets+": "+err.Error())
		}
		info.Subnets = subnets
		for _, s := range subnets {
			f := ipfamily.OfPrefix(s)
			if _, dup := info.MgmtIPs[f]; !dup {
				info.MgmtIPs[f] = ipfamily.Nth(s, 2)
			}
		}
	}
	switch {
	case a[AnnotGRLRPIfAddrs] != "":
		var m map[string]map[string]string
		if err := json.Unmarshal([]byte(a[AnnotGRLRPIfAddrs]), &m); err != nil {
			info.Problems = append(info.Problems, AnnotGRLRPIfAddrs+": "+err.Error())
		} else {
			info.JoinIPs = parseFamilyIfAddr(m[defaultNetworkField])
		}
	case a[AnnotGRLRPIfAddr] != "":
		var m map[string]string
		if err := json.Unmarshal([]byte(a[AnnotGRLRPIfAddr]), &m); err != nil {
			info.Problems = append(info.Problems, AnnotGRLRPIfAddr+": "+err.Error())
		} else {
			info.JoinIPs = parseFamilyIfAddr(m)
		}
	case a[AnnotNodeID] != "":
		id, err := strconv.Atoi(a[AnnotNodeID])
		if err != nil || id <= 0 {
			info.Problems = append(info.Problems, AnnotNodeID+": not a positive number")
			break
		}
		for _, js := range joinSubnets {
			ip := ipfamily.Nth(js, id)
			if js.Contains(ip) {
				info.JoinIPs[ipfamily.OfPrefix(js)] = ip
			}
		}
	}
	if v := a[AnnotTransitIfAddr]; v != "" {
		var m map[string]string
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			info.Problems = append(info.Problems, AnnotTransitIfAddr+": "+err.Error())
		} else {
			info.TransitIPs = parseFamilyIfAddr(m)
		}
	}
	info.HostIPs = NodeHostIPs(n, info)
	if v := a[AnnotL3GatewayCfg]; v != "" {
		ParseGatewayConfig(v, info)
	}
	if v := a[ReportAnnotation]; v != "" {
		r, err := ParseReport(v)
		if err != nil {
			info.Problems = append(info.Problems, ReportAnnotation+": "+err.Error())
		}
		info.Report = r
	}
	return info
}

// parseGatewayConfig reads l3-gateway-config's default network: mode,
// gateway router MAC and next hops (Problems when it is not JSON).
func ParseGatewayConfig(v string, info *NodeInfo) {
	var m map[string]struct {
		Mode     string   `json:"mode"`
		MAC      string   `json:"mac-address"`
		NextHops []string `json:"next-hops"`
		NextHop  string   `json:"next-hop"`
	}
	if err := json.Unmarshal([]byte(v), &m); err == nil {
		gw := m[defaultNetworkField]
		info.GatewayMode = gw.Mode
		if mac, err := net.ParseMAC(gw.MAC); err == nil && len(mac) == 6 {
			info.GatewayMAC = mac
		}
		for _, s := range append(gw.NextHops, gw.NextHop) {
			if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(info.GatewayNextHops, ipfamily.Canonical(a)) {
				info.GatewayNextHops = append(info.GatewayNextHops, ipfamily.Canonical(a))
			}
		}
	} else {
		info.Problems = append(info.Problems, AnnotL3GatewayCfg+": "+err.Error())
	}
}

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// parseNodeSubnets accepts {"default":["10.244.1.0/24", ...]} and {"default":"10.244.1.0/24"}.
func parseNodeSubnets(v string) ([]netip.Prefix, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, err
	}
	raw, ok := m[defaultNetworkField]
	if !ok {
		return nil, errNoDefault
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, err
		}
		list = []string{one}
	}
	var out []netip.Prefix
	for _, s := range list {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return out, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

type parseError string

func (e parseError) Error() string { return string(e) }

const errNoDefault = parseError(`no "default" network`)

// parseFamilyIfAddr reads {"ipv4":"100.64.0.2/16","ipv6":"fd98::2/64"}.
func parseFamilyIfAddr(m map[string]string) map[ipfamily.Family]netip.Addr {
	out := map[ipfamily.Family]netip.Addr{}
	for k, v := range m {
		f, err := ipfamily.Parse(k)
		if err != nil {
			continue
		}
		if p, err := netip.ParsePrefix(v); err == nil && ipfamily.OfPrefix(p) == f {
			out[f] = ipfamily.Canonical(p.Addr())
		} else if a, err := netip.ParseAddr(v); err == nil && ipfamily.Of(a) == f {
			out[f] = ipfamily.Canonical(a)
		}
	}
	return out
}

// hostIPs are the addresses in host-cidrs, or, without it, the node's
// primary interface address and its InternalIP/ExternalIP status addresses.
func NodeHostIPs(n *corev1.Node, info *NodeInfo) []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		a = ipfamily.Canonical(a)
		if a.IsValid() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if v := n.Annotations[AnnotHostCIDRs]; v != "" {
		var list []string
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			info.Problems = append(info.Problems, AnnotHostCIDRs+": "+err.Error())
		}
		for _, s := range list {
			if p, err := netip.ParsePrefix(s); err == nil {
				add(p.Addr())
			} else if a, err := netip.ParseAddr(s); err == nil {
				add(a)
			}
		}
	}
	if len(out) == 0 {
		if v := n.Annotations[AnnotPrimaryIfAddr]; v != "" {
			var m map[string]string
			if json.Unmarshal([]byte(v), &m) == nil {
				for _, f := range ipfamily.All {
					if a, ok := parseFamilyIfAddr(m)[f]; ok {
						add(a)
					}
				}
			}
		}
		for _, ad := range n.Status.Addresses {
			if ad.Type == corev1.NodeInternalIP || ad.Type == corev1.NodeExternalIP {
				if a, err := netip.ParseAddr(ad.Address); err == nil {
					add(a)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}
