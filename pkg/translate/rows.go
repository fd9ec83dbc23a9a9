package translate

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The external_ids every row ovn-egress writes carries (DESIGN §3).
const (
	KeyOwnerController = "k8s.ovn.org/owner-controller"
	KeyOwnerType       = "k8s.ovn.org/owner-type"
	KeyName            = "k8s.ovn.org/name"
	KeyFamily          = "ip-family"
	KeyID              = "k8s.ovn.org/id"
	// KeyService names the EgressService a NAT row belongs to (readability only).
	KeyService = "k8s.ovn.org/egress-service"

	// OwnerController is the value of KeyOwnerController on ovn-egress's rows.
	OwnerController = "ovn-egress"
)

// Owner types: what a row is for.
const (
	// OwnerHost: the host path of LoadBalancerIP services on a host (reroute
	// to its management port; the node agent SNATs).
	OwnerHost = "EgressServiceHost"
	// OwnerGateway: the gateway path (reroute to GR_<host>'s join IP, NAT rows on the GR).
	OwnerGateway = "EgressServiceGateway"
	// OwnerNAT: the gateway path's snat NAT rows on GR_<host>: one per
	// endpoint, or with Config.NATMatch one per (service, family) plus the
	// node-address row.
	OwnerNAT = "EgressServiceNAT"
	// OwnerNATSet: with Config.NATMatch, the address set of one service's
	// endpoints that its NAT row matches.
	OwnerNATSet = "EgressServiceNATSet"
	// OwnerNetwork: sourceIPBy=Network in shared gateway mode: a node's own
	// endpoints rerouted to its own management port.
	OwnerNetwork = "EgressServiceNetwork"
	// OwnerUnassigned: --unassigned-traffic=drop for services without a host.
	OwnerUnassigned = "EgressServiceUnassigned"
	// OwnerNodeIPs: the cluster-wide address set of node addresses.
	OwnerNodeIPs = "EgressServiceNodeIPs"
	// OwnerClusterRoute: interconnect, the host's zone: the src-ip route of
	// the cluster subnets to the host's GR, so that pod traffic of other
	// zones arriving over the transit switch is routed (and so reaches the
	// reroute policies) — what ovn-kubernetes' zone controller adds when
	// its own egress features are on.
	OwnerClusterRoute = "EgressServiceClusterRoute"
)

// ClusterRouter is the distributed router every policy is attached to.
const ClusterRouter = "ovn_cluster_router"

// GatewayRouter is the name of a node's gateway router.
func GatewayRouter(node string) string { return "GR_" + node }

// Key groups the rows written in one transaction: everything about one node
// (as a host, as a Network-mode node, its GR's NAT rows), or the
// cluster-wide rows.
type Key string

// ClusterKey holds the cluster-wide rows (the node-IP address sets).
const ClusterKey Key = "cluster"

// NodeKey is the key of a node's rows.
func NodeKey(node string) Key { return Key("node/" + node) }

// IsNode reports whether k is a node's key.
func (k Key) IsNode() bool { return strings.HasPrefix(string(k), "node/") }

// Node returns the node name of a node key ("" for the cluster key).
func (k Key) Node() string { n, _ := strings.CutPrefix(string(k), "node/"); return n }

// KeyOf returns the key a row belongs to, from its external_ids; ok is false
// for rows ovn-egress does not own.
func KeyOf(ids map[string]string) (Key, bool) {
	if ids[KeyOwnerController] != OwnerController {
		return "", false
	}
	if ids[KeyOwnerType] == OwnerNodeIPs {
		return ClusterKey, true
	}
	switch ids[KeyOwnerType] {
	case OwnerUnassigned:
		return Key("unassigned"), true
	case OwnerEgressIP, OwnerEgressIPNAT:
		return EgressIPKey(ids[KeyName]), true
	}
	return NodeKey(ids[KeyName]), true
}

// OwnerIDs builds the external_ids of a row; extra parts make the id unique
// (e.g. the endpoint of a NAT row).
func OwnerIDs(ownerType, name string, f ipfamily.Family, extra ...string) map[string]string {
	parts := append([]string{OwnerController, ownerType, name, string(f)}, extra...)
	return map[string]string{
		KeyOwnerController: OwnerController,
		KeyOwnerType:       ownerType,
		KeyName:            name,
		KeyFamily:          string(f),
		KeyID:              strings.Join(parts, ":"),
	}
}

// AddressSetName turns a row id into an OVN identifier: "a" + the decimal
// FNV-1a 64-bit hash of the id (the ovn-kubernetes convention).
func AddressSetName(id string) string {
	h := fnv.New64a()
	h.Write([]byte(id))
	return fmt.Sprintf("a%d", h.Sum64())
}

// AddressSet is a desired NB Address_Set row.
type AddressSet struct {
	Name        string            `json:"name"`
	Addresses   []string          `json:"addresses"`
	ExternalIDs map[string]string `json:"external_ids"`
}

// Policy is a desired Logical_Router_Policy row on Router.
type Policy struct {
	Router      string            `json:"router"`
	Priority    int               `json:"priority"`
	Match       string            `json:"match"`
	Action      string            `json:"action"`
	Nexthops    []string          `json:"nexthops,omitempty"`
	Options     map[string]string `json:"options,omitempty"`
	ExternalIDs map[string]string `json:"external_ids"`
}

// PodToNodeMark is the pkt_mark the allow policy of served endpoints'
// traffic to node addresses sets: ovn-kubernetes' Pod-To-Node policy sets the
// same (1008, 0x3f0), and its node side (and ovn-egress's agent) never SNAT
// a packet that carries it.
const PodToNodeMark = "1008"

// NAT is a desired NAT row on Router (a gateway router).
type NAT struct {
	Router     string `json:"router"`
	Type       string `json:"type"`
	ExternalIP string `json:"external_ip"`
	LogicalIP  string `json:"logical_ip"`
	// Match and Priority need an NB with NAT.match (Config.NATMatch).
	Match             string            `json:"match,omitempty"`
	Priority          int               `json:"priority,omitempty"`
	ExternalPortRange string            `json:"external_port_range,omitempty"`
	ExternalIDs       map[string]string `json:"external_ids"`
}

// Priorities of the gateway path's NAT rows with a match (Config.NATMatch):
// northd gives a NAT row with a match the flow priority 300 + priority, above
// every row without one (those rank by prefix length, at most 129).
const (
	// NATServicePriority: a service's row, SNAT to its LB IP.
	NATServicePriority = 10
	// NATNodePriority: a host GR's row keeping the node's own SNAT for the
	// served endpoints' traffic to node addresses.
	NATNodePriority = 20
)

// StaticRoute is a desired Logical_Router_Static_Route on Router.
type StaticRoute struct {
	Router      string            `json:"router"`
	IPPrefix    string            `json:"ip_prefix"`
	Nexthop     string            `json:"nexthop"`
	Policy      string            `json:"policy"`
	ExternalIDs map[string]string `json:"external_ids"`
}

// Policy actions.
const (
	ActionReroute = "reroute"
	ActionAllow   = "allow"
	// ActionAllowNode is not an OVN action: it names (in the row id) the
	// allow policy of traffic to node addresses.
	ActionAllowNode = "allow-node"
	ActionDrop      = "drop"
)

// Rows are the desired rows of one key.
type Rows struct {
	AddressSets []AddressSet  `json:"addressSets,omitempty"`
	Policies    []Policy      `json:"policies,omitempty"`
	NATs        []NAT         `json:"nats,omitempty"`
	Routes      []StaticRoute `json:"routes,omitempty"`
}

// Len is the number of rows.
func (r *Rows) Len() int { return len(r.AddressSets) + len(r.Policies) + len(r.NATs) + len(r.Routes) }

func (r *Rows) Sort() {
	slices.SortFunc(r.AddressSets, func(a, b AddressSet) int { return strings.Compare(a.ExternalIDs[KeyID], b.ExternalIDs[KeyID]) })
	slices.SortFunc(r.Policies, func(a, b Policy) int { return strings.Compare(a.ExternalIDs[KeyID], b.ExternalIDs[KeyID]) })
	slices.SortFunc(r.NATs, func(a, b NAT) int { return strings.Compare(a.ExternalIDs[KeyID], b.ExternalIDs[KeyID]) })
	slices.SortFunc(r.Routes, func(a, b StaticRoute) int { return strings.Compare(a.ExternalIDs[KeyID], b.ExternalIDs[KeyID]) })
}

// AllowDestinations is the destination half of the first allow policy: the
// cluster, join and service networks of the family. Node addresses have an
// allow policy of their own, which marks the packets as ovn-kubernetes'
// Pod-To-Node policy does (PodToNodeMark): whichever of the two equal-priority
// rows OVN picks, the result is the same. Written positively: a negation (!=)
// in a match explodes into a cross product of OpenFlow flows in
// ovn-controller.
func AllowDestinations(cfg Config, f ipfamily.Family) string {
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
	return AddressSetName(OwnerIDs(OwnerNodeIPs, "node-ips", f)[KeyID])
}

// AddrStrings sorts the addresses (in place), drops duplicates and
// formats them.
func AddrStrings(ips []netip.Addr) []string { return FormatAddrs(SortedAddrs(ips)) }

// SortedAddrs sorts the addresses in place and drops duplicates.
func SortedAddrs(ips []netip.Addr) []netip.Addr {
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(ips)
}

// FormatAddrs formats addresses.
func FormatAddrs(ips []netip.Addr) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}
