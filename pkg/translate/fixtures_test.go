package translate

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// world is a small cluster for table tests: nodes node1..nodeN with kind-like
// addressing (node i: 10.244.i.0/24, fd00:10:244:i::/64), and helpers to add
// EgressServices, LoadBalancer Services and EndpointSlices.
type world struct {
	in       Input
	families []ipfamily.Family
	raw      map[string]*corev1.Node
}

func newWorld(n int, fams ...ipfamily.Family) *world {
	if len(fams) == 0 {
		fams = []ipfamily.Family{ipfamily.V4}
	}
	cfg := DefaultConfig()
	cfg.ClusterSubnets, cfg.ServiceCIDRs = nil, nil
	for _, f := range fams {
		if f == ipfamily.V4 {
			cfg.ClusterSubnets = append(cfg.ClusterSubnets, netip.MustParsePrefix("10.244.0.0/16"))
			cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, netip.MustParsePrefix("10.96.0.0/16"))
		} else {
			cfg.ClusterSubnets = append(cfg.ClusterSubnets, netip.MustParsePrefix("fd00:10:244::/48"))
			cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, netip.MustParsePrefix("fd00:10:96::/112"))
		}
	}
	w := &world{families: fams, raw: map[string]*corev1.Node{}, in: Input{Config: cfg,
		Services: map[string]*corev1.Service{}, EndpointSlices: map[string][]*discoveryv1.EndpointSlice{},
		Nodes: map[string]*NodeInfo{}, Current: map[string][]string{}}}
	for i := 1; i <= n; i++ {
		w.addNode(i, GatewayModeShared)
	}
	return w
}

func (w *world) addNode(i int, gwMode string) *corev1.Node {
	name := fmt.Sprintf("node%d", i)
	var subnets, hostCIDRs []string
	lrp := map[string]string{}
	for _, f := range w.families {
		if f == ipfamily.V4 {
			subnets = append(subnets, fmt.Sprintf(`"10.244.%d.0/24"`, i))
			hostCIDRs = append(hostCIDRs, fmt.Sprintf(`"172.18.0.%d/16"`, i+1))
			lrp["ipv4"] = fmt.Sprintf("100.64.0.%d/16", i+1)
		} else {
			subnets = append(subnets, fmt.Sprintf(`"fd00:10:244:%x::/64"`, i))
			hostCIDRs = append(hostCIDRs, fmt.Sprintf(`"fc00:f853:ccd:e793::%x/64"`, i+1))
			lrp["ipv6"] = fmt.Sprintf("fd98::%x/64", i+1)
		}
	}
	var lrpParts []string
	for _, k := range []string{"ipv4", "ipv6"} {
		if v, ok := lrp[k]; ok {
			lrpParts = append(lrpParts, fmt.Sprintf("%q:%q", k, v))
		}
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}, Annotations: map[string]string{
			AnnotNodeSubnets:  `{"default":[` + strings.Join(subnets, ",") + `]}`,
			AnnotGRLRPIfAddr:  "{" + strings.Join(lrpParts, ",") + "}",
			AnnotHostCIDRs:    "[" + strings.Join(hostCIDRs, ",") + "]",
			AnnotL3GatewayCfg: `{"default":{"mode":"` + gwMode + `"}}`,
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	w.raw[name] = n
	w.in.Nodes[name] = ParseNode(n, w.in.Config.JoinSubnets)
	return n
}

// es adds an EgressService with the given host ("" none, "ALL" Network mode).
func (w *world) es(key, host string, mutate ...func(*egressv1.EgressService)) *egressv1.EgressService {
	ns, name, _ := strings.Cut(key, "/")
	e := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: egressv1.EgressServiceStatus{Host: host}}
	if host == egressv1.HostAll {
		e.Spec.SourceIPBy = egressv1.Network
	}
	for _, m := range mutate {
		m(e)
	}
	w.in.EgressServices = append(w.in.EgressServices, e)
	return e
}

// svc adds a LoadBalancer Service with the given ingress IPs.
func (w *world) svc(key string, ingress ...string) *corev1.Service {
	ns, name, _ := strings.Cut(key, "/")
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30300}}}}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	w.in.Services[key] = s
	return s
}

// eps sets the Service's endpoints, each "ip@node".
func (w *world) eps(key string, eps ...string) {
	ns, name, _ := strings.Cut(key, "/")
	slices := map[discoveryv1.AddressType]*discoveryv1.EndpointSlice{}
	var order []*discoveryv1.EndpointSlice
	for _, e := range eps {
		ip, node, _ := strings.Cut(e, "@")
		at := discoveryv1.AddressTypeIPv4
		if strings.Contains(ip, ":") {
			at = discoveryv1.AddressTypeIPv6
		}
		s := slices[at]
		if s == nil {
			s = &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + strings.ToLower(string(at)),
				Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: at}
			slices[at] = s
			order = append(order, s)
		}
		ep := discoveryv1.Endpoint{Addresses: []string{ip}}
		if node != "" {
			ep.NodeName = &node
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	w.in.EndpointSlices[key] = order
}

// ready writes the report node's agent would publish for the current objects.
func (w *world) ready(node string, keys ...string) {
	n := w.in.Nodes[node]
	if n.Report == nil {
		n.Report = Report{}
	}
	for _, key := range keys {
		var e *egressv1.EgressService
		for _, x := range w.in.EgressServices {
			if EgressServiceKey(x) == key {
				e = x
			}
		}
		svc := w.in.Services[key]
		eps := ServiceEndpoints(svc, w.in.EndpointSlices[key], w.in.Config.ClusterSubnets)
		ingress, _ := IngressIPs(svc)
		sr := ServiceReport{Network: e.Spec.Network, Endpoints: EndpointsHash(AgentEndpoints(e.Status.Host, node, eps, ingress))}
		if e.Status.Host != HostAll {
			sr.IngressIPs = ReportIPs(ingress)
		}
		n.Report[key] = sr
	}
}
