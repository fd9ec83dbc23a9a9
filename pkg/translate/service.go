package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// Endpoint is one cluster-networked address backing a Service.
type Endpoint struct {
	IP netip.Addr
	// Node is the endpoint's nodeName; empty when the slice does not say.
	Node string
}

// MirroringManager is the endpointslice.kubernetes.io/managed-by value of
// the EndpointSlices kube-controller-manager mirrors from Endpoints objects
// (of Services without a selector).
const MirroringManager = "endpointslicemirroring-controller.k8s.io"

// countedSlice tells whether slice s gives svc endpoints: labelled
// kubernetes.io/service-name=<svc>, in the Service's namespace, and not
// mirrored from an Endpoints object. Endpoints is what the `edit` role of
// clusters created before Kubernetes 1.22 lets a namespace's tenants write
// (CVE-2021-25740): any address, a pod of another namespace included, so a
// mirrored slice would let a tenant take another namespace's pods into its
// EgressService. Slices written directly need EndpointSlice write, which no
// built-in tenant role grants (docs/security.md).
func CountedSlice(svc *corev1.Service, s *discoveryv1.EndpointSlice) bool {
	return s != nil && svc != nil && s.Namespace == svc.Namespace && s.Labels[discoveryv1.LabelServiceName] == svc.Name &&
		s.Labels[discoveryv1.LabelManagedBy] != MirroringManager
}

// MirroredSlices returns the names of svc's EndpointSlices that are
// mirrored from Endpoints and therefore not counted (sorted).
func MirroredSlices(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range eps {
		if s != nil && svc != nil && s.Namespace == svc.Namespace && s.Labels[discoveryv1.LabelServiceName] == svc.Name &&
			s.Labels[discoveryv1.LabelManagedBy] == MirroringManager {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ServiceEndpoints returns every address of every endpoint of the Service's
// EndpointSlices that lies in one of the cluster subnets, once, sorted by
// address. Readiness is not looked at: a terminating pod still egresses and
// keeps its identity. Addresses outside the cluster subnets (host-networked
// endpoints) and unparsable ones are ignored. Only the slices countedSlice
// accepts count.
func ServiceEndpoints(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, clusterSubnets []netip.Prefix) []Endpoint {
	var out []Endpoint
	for _, s := range eps {
		if !CountedSlice(svc, s) {
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, e := range s.Endpoints {
			node := ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				if ip = ipfamily.Canonical(ip); InAny(ip, clusterSubnets) {
					out = append(out, Endpoint{IP: ip, Node: node})
				}
			}
		}
	}
	// Sorted by address; an address listed twice counts once (the first
	// node named for it wins, as the slices were listed).
	slices.SortStableFunc(out, func(a, b Endpoint) int { return a.IP.Compare(b.IP) })
	return slices.CompactFunc(out, func(a, b Endpoint) bool { return a.IP == b.IP })
}

// Misplaced is an endpoint address that lies in a node's pod subnet
// (k8s.ovn.org/node-subnets) but in none of the configured cluster subnets:
// a pod that translation would otherwise skip as host-networked.
type Misplaced struct {
	IP     netip.Addr
	Node   string       // the node whose pod subnet holds it
	Subnet netip.Prefix // that subnet
}

// MisplacedEndpoints returns svc's endpoint addresses outside the cluster
// subnets that podSubnet places in a node's pod subnet, once each, sorted.
func MisplacedEndpoints(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, clusterSubnets []netip.Prefix,
	podSubnet func(netip.Addr) (string, netip.Prefix, bool)) []Misplaced {
	var out []Misplaced
	seen := map[netip.Addr]bool{}
	for _, s := range eps {
		if !CountedSlice(svc, s) {
			continue
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				if ip = ipfamily.Canonical(ip); seen[ip] || InAny(ip, clusterSubnets) {
					continue
				}
				seen[ip] = true
				if node, subnet, ok := podSubnet(ip); ok {
					out = append(out, Misplaced{IP: ip, Node: node, Subnet: subnet})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Misplaced) int { return a.IP.Compare(b.IP) })
	return out
}

// message is the problem's text: what is skipped and the flag to set.
func (m Misplaced) Message(clusterSubnets []netip.Prefix) string {
	return fmt.Sprintf("endpoint %s is in node %s's pod subnet %s but in no cluster subnet (%s); it is not rerouted or SNATed: add the %s cluster network to --cluster-subnets",
		m.IP, m.Node, m.Subnet, prefixList(clusterSubnets), ipfamily.Of(m.IP).Name())
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func InAny(ip netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// IngressIPs returns the Service's load-balancer ingress IP per family: the
// first IP of that family in status.loadBalancer.ingress. The families that
// had more than one IP are returned too (the first one is used).
func IngressIPs(svc *corev1.Service) (ips map[ipfamily.Family]netip.Addr, multiple []ipfamily.Family) {
	ips = map[ipfamily.Family]netip.Addr{}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ip, err := netip.ParseAddr(in.IP)
		if err != nil {
			continue
		}
		ip = ipfamily.Canonical(ip)
		f := ipfamily.Of(ip)
		if _, ok := ips[f]; ok {
			if ips[f] != ip && !slices.Contains(multiple, f) {
				multiple = append(multiple, f)
			}
			continue
		}
		ips[f] = ip
	}
	slices.SortFunc(multiple, func(a, b ipfamily.Family) int { return cmp.Compare(a, b) })
	return ips, multiple
}

// ClusterIPs returns the Service's parsed ClusterIPs (none for headless).
func ClusterIPs(svc *corev1.Service) []netip.Addr {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ipfamily.Canonical(ip))
		}
	}
	return out
}

// IsLoadBalancer reports whether the Service is of type LoadBalancer.
func IsLoadBalancer(svc *corev1.Service) bool {
	return svc != nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

// ETPLocal reports whether the Service has externalTrafficPolicy: Local.
func ETPLocal(svc *corev1.Service) bool {
	return svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}
