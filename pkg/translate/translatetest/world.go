// Package translatetest holds the fixtures the translation engines' tests
// share: a small cluster of nodes with kind-like addressing, and helpers to
// add EgressServices, LoadBalancer Services, EndpointSlices and agents'
// reports; and the golden-file comparison.
package translatetest

import (
	"flag"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// World is a small cluster for table tests: nodes node1..nodeN with kind-like
// addressing (node i: 10.244.i.0/24, fd00:10:244:i::/64), and helpers to add
// EgressServices, LoadBalancer Services and EndpointSlices.
type World struct {
	In       translate.Input
	Families []ipfamily.Family
	// Raw are the Node objects the parses in In.Nodes came from.
	Raw map[string]*corev1.Node
}

// NewWorld returns n nodes in shared gateway mode, of the families (IPv4
// when none).
func NewWorld(n int, fams ...ipfamily.Family) *World {
	if len(fams) == 0 {
		fams = []ipfamily.Family{ipfamily.V4}
	}
	cfg := translate.DefaultConfig()
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
	w := &World{Families: fams, Raw: map[string]*corev1.Node{}, In: translate.Input{Config: cfg,
		Services: map[string]*corev1.Service{}, EndpointSlices: map[string][]*discoveryv1.EndpointSlice{},
		Nodes: map[string]*translate.NodeInfo{}, Current: map[string][]string{}}}
	for i := 1; i <= n; i++ {
		w.AddNode(i, translate.GatewayModeShared)
	}
	return w
}

// AddNode adds node i in gateway mode gwMode.
func (w *World) AddNode(i int, gwMode string) *corev1.Node {
	name := fmt.Sprintf("node%d", i)
	var subnets, hostCIDRs []string
	lrp := map[string]string{}
	for _, f := range w.Families {
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
			translate.AnnotNodeSubnets:  `{"default":[` + strings.Join(subnets, ",") + `]}`,
			translate.AnnotGRLRPIfAddr:  "{" + strings.Join(lrpParts, ",") + "}",
			translate.AnnotHostCIDRs:    "[" + strings.Join(hostCIDRs, ",") + "]",
			translate.AnnotL3GatewayCfg: `{"default":{"mode":"` + gwMode + `"}}`,
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	w.Raw[name] = n
	w.In.Nodes[name] = translate.ParseNode(n, w.In.Config.JoinSubnets)
	return n
}

// ES adds an EgressService with the given host ("" none, "ALL" Network mode).
func (w *World) ES(key, host string, mutate ...func(*egressv1.EgressService)) *egressv1.EgressService {
	ns, name, _ := strings.Cut(key, "/")
	e := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: egressv1.EgressServiceStatus{Host: host}}
	if host == egressv1.HostAll {
		e.Spec.SourceIPBy = egressv1.Network
	}
	for _, m := range mutate {
		m(e)
	}
	w.In.EgressServices = append(w.In.EgressServices, e)
	return e
}

// Svc adds a LoadBalancer Service with the given ingress IPs.
func (w *World) Svc(key string, ingress ...string) *corev1.Service {
	ns, name, _ := strings.Cut(key, "/")
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30300}}}}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	w.In.Services[key] = s
	return s
}

// EPs sets the Service's endpoints, each "ip@node".
func (w *World) EPs(key string, eps ...string) {
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
	w.In.EndpointSlices[key] = order
}

// Ready writes the report node's agent would publish for the current objects.
func (w *World) Ready(node string, keys ...string) {
	n := w.In.Nodes[node]
	if n.Report == nil {
		n.Report = translate.Report{}
	}
	for _, key := range keys {
		var e *egressv1.EgressService
		for _, x := range w.In.EgressServices {
			if translate.EgressServiceKey(x) == key {
				e = x
			}
		}
		svc := w.In.Services[key]
		eps := translate.ServiceEndpoints(svc, w.In.EndpointSlices[key], w.In.Config.ClusterSubnets)
		ingress, _ := translate.IngressIPs(svc)
		sr := translate.ServiceReport{Network: e.Spec.Network, Endpoints: translate.EndpointsHash(translate.AgentEndpoints(e.Status.Host, node, eps, ingress))}
		if e.Status.Host != translate.HostAll {
			sr.IngressIPs = translate.ReportIPs(ingress)
		}
		n.Report[key] = sr
	}
}

// ICWorld makes every node its own zone with a transit-switch address
// (100.88.0.i+1/16, fd97::i+1/64), as current ovn-kubernetes does.
func ICWorld(n int, fams ...ipfamily.Family) *World {
	w := NewWorld(n, fams...)
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node%d", i)
		raw := w.Raw[name]
		var parts []string
		for _, f := range w.Families {
			if f == ipfamily.V4 {
				parts = append(parts, fmt.Sprintf(`"ipv4":"100.88.0.%d/16"`, i+1))
			} else {
				parts = append(parts, fmt.Sprintf(`"ipv6":"fd97::%x/64"`, i+1))
			}
		}
		raw.Annotations[translate.AnnotTransitIfAddr] = "{" + strings.Join(parts, ",") + "}"
		raw.Annotations[translate.AnnotZoneName] = name
		w.In.Nodes[name] = translate.ParseNode(raw, w.In.Config.JoinSubnets)
	}
	return w
}

// update is the tests' -update flag: it rewrites the golden files (defined
// once, whichever test file of a package asks first).
func update() bool {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
	f := flag.Lookup("update")
	return f.Value.String() == "true"
}

// Golden compares got with testdata/<name>.golden (rewritten with -update).
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if update() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the package's tests with -update to create it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from the golden file (-update accepts it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// GoldenDesired compares d's YAML and its ovn-nbctl commands with
// testdata/<name>.yaml.golden and testdata/<name>.nbctl.golden.
func GoldenDesired(t *testing.T, name string, d *translate.Desired) {
	t.Helper()
	y, err := translate.YAML(d)
	if err != nil {
		t.Fatal(err)
	}
	Golden(t, name+".yaml", y)
	var lines []string
	for _, cmd := range translate.NBCtlCommands(d) {
		lines = append(lines, translate.ShellQuote(cmd))
	}
	Golden(t, name+".nbctl", []byte(strings.Join(lines, "\n")+"\n"))
}
