package translate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Reasons an ingress IP is not used as an egress source.
const (
	// ReasonInvalidIngressIP: the load-balancer ingress IP is an address
	// no pod may leave with (a node's own, one inside the cluster, join or
	// service networks, loopback, link-local, multicast, unspecified).
	ReasonInvalidIngressIP Reason = "InvalidIngressIP"
	// ReasonIngressIPShared: EgressServices of two namespaces have the same
	// ingress IP; neither is hosted until one gives it up.
	ReasonIngressIPShared Reason = "IngressIPShared"
)

// IngressNetworks are the networks no load-balancer ingress IP used as an
// egress source may lie in.
type IngressNetworks struct {
	ClusterSubnets, JoinSubnets, ServiceCIDRs []netip.Prefix
}

// Refusal says why ip may not be an egress source ("" when it may):
// pods that leave with it would take another host's, another pod's or no
// one's identity. nodeIPs (address → node) may be nil.
func (n IngressNetworks) Refusal(ip netip.Addr, nodeIPs map[netip.Addr]string) string {
	switch {
	case !ip.IsValid() || ip.IsUnspecified():
		return "is unspecified"
	case ip.IsLoopback():
		return "is a loopback address"
	case ip.IsLinkLocalUnicast():
		return "is link-local"
	case ip.IsMulticast():
		return "is multicast"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "is the broadcast address"
	}
	for _, nets := range []struct {
		what string
		ps   []netip.Prefix
	}{{"cluster subnet", n.ClusterSubnets}, {"join subnet", n.JoinSubnets}, {"service CIDR", n.ServiceCIDRs}} {
		for _, p := range nets.ps {
			if p.Contains(ip) {
				return fmt.Sprintf("is inside the %s %s", nets.what, p)
			}
		}
	}
	if node, ok := nodeIPs[ip]; ok {
		return fmt.Sprintf("is node %s's own address", node)
	}
	return ""
}

// NodeAddresses are a Node's own addresses as ParseNode reads them
// (host-cidrs, else its primary interface and status addresses), without
// parsing the rest of its annotations.
func NodeAddresses(n *corev1.Node) []netip.Addr {
	return NodeHostIPs(n, &NodeInfo{})
}

// otherNamespaces returns the claims on one ingress IP ("namespace/name")
// that are not in key's namespace, sorted.
func OtherNamespaces(key string, claims []string) []string {
	ns, _, _ := strings.Cut(key, "/")
	var out []string
	for _, c := range claims {
		if cns, _, _ := strings.Cut(c, "/"); cns != ns {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
