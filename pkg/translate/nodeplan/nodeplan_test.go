package nodeplan

import (
	"flag"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// The -update flag rewrites golden files. It is defined only if another
// test file of the package has not defined it already, so both can share it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata/")
	}
}

func npUpdateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// The fixture follows ovn-kubernetes' node tests (§4.3 of the research
// notes): cluster subnets 10.128.0.0/16 and fe00::/16, LB IPs 5.5.5.5 and
// 6.6.6.6, a host-networked endpoint 192.168.18.15, node port 30300.
var planSubnets = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/16"), netip.MustParsePrefix("fe00::/16")}

const planNode = "node1"

func planES(ns, name, host string, by egressv1.SourceIPMode, network string) *egressv1.EgressService {
	return &egressv1.EgressService{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       egressv1.EgressServiceSpec{SourceIPBy: by, Network: network},
		Status:     egressv1.EgressServiceStatus{Host: host},
	}
}

type npSvcOpt func(*corev1.Service)

func npETPLocal(nodePorts ...int32) npSvcOpt {
	return func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		for i, np := range nodePorts {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: 8080, NodePort: np})
		}
	}
}

func npType(t corev1.ServiceType) npSvcOpt { return func(s *corev1.Service) { s.Spec.Type = t } }

func planSvc(ns, name string, clusterIPs, ingress []string, opts ...npSvcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: clusterIPs,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster},
	}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// planSlice builds an EndpointSlice; each endpoint is "ip@node" or "ip".
func planSlice(ns, svc string, family discoveryv1.AddressType, eps ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-" + strings.ToLower(string(family)),
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
	}
	for _, e := range eps {
		ip, node, _ := strings.Cut(e, "@")
		ep := discoveryv1.Endpoint{Addresses: []string{ip}}
		if node != "" {
			ep.NodeName = &node
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func planInput(ess []*egressv1.EgressService, svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, tables map[string]uint32) NodePlanInput {
	return NodePlanInput{Node: planNode, EgressServices: ess, Services: svcs, EndpointSlices: eps,
		ClusterSubnets: planSubnets, Tables: tables, Config: DefaultNodePlanConfig()}
}

func npStrs[T fmt.Stringer](xs []T) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, x.String())
	}
	return out
}

func npReasons(ps translate.Problems) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Key+" "+string(p.Reason))
	}
	return out
}

// renderNodePlan is the golden form of a plan.
func renderNodePlan(o NodePlanOutput) string {
	var b strings.Builder
	b.WriteString("# ip rules\n")
	for _, r := range o.Desired.Rules {
		b.WriteString(r.String() + "\n")
	}
	b.WriteString("# snat map elements\n")
	for _, e := range o.Desired.SNAT {
		b.WriteString(e.String() + "\n")
	}
	b.WriteString("# no snat to\n")
	for _, p := range o.Desired.NoSNAT {
		b.WriteString(p.String() + "\n")
	}
	b.WriteString("# report\n" + o.Report().Encode() + "\n")
	b.WriteString("# problems\n")
	for _, p := range o.Problems {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

func npCheckGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "nodeplan", name+".golden")
	if npUpdateGolden() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/translate -run NodePlan -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file; got:\n%s\nwant:\n%s", path, got, want)
	}
}

var (
	npV4 = discoveryv1.AddressTypeIPv4
	npV6 = discoveryv1.AddressTypeIPv6
	npLB = egressv1.LoadBalancerIP
)

func TestNodePlan(t *testing.T) {
	dual := []string{"10.96.0.10", "fd00:96::10"}
	cases := []struct {
		name         string
		in           NodePlanInput
		wantRules    []string
		wantSNAT     []string
		wantReport   []string // keys
		wantProblems []string // "key Reason"
	}{{
		// ovn-k §4.3 case 2: an element per cluster-networked endpoint; the
		// host-networked one (192.168.18.15) is never configured.
		name: "snat-host-path-dual-stack",
		in: planInput(
			[]*egressv1.EgressService{planES("namespace1", "service1", planNode, "", "")},
			[]*corev1.Service{planSvc("namespace1", "service1", dual, []string{"5.5.5.5", "5:5::5"})},
			[]*discoveryv1.EndpointSlice{
				planSlice("namespace1", "service1", npV4, "10.128.0.3@node2", "192.168.18.15@node1", "10.128.1.4@node1"),
				planSlice("namespace1", "service1", npV6, "fe00:10:128::3@node2"),
			}, nil),
		wantSNAT: []string{
			"v4 10.128.0.3 : 5.5.5.5  # namespace1/service1",
			"v4 10.128.1.4 : 5.5.5.5  # namespace1/service1",
			"v6 fe00:10:128::3 : 5:5::5  # namespace1/service1",
		},
		wantReport: []string{"namespace1/service1"},
	}, {
		name: "not-hosted-here",
		in: planInput(
			[]*egressv1.EgressService{planES("ns", "a", "node2", npLB, "100"), planES("ns", "b", "", npLB, "")},
			[]*corev1.Service{planSvc("ns", "a", dual, []string{"5.5.5.5"}), planSvc("ns", "b", dual, []string{"6.6.6.6"})},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "a", npV4, "10.128.0.3"), planSlice("ns", "b", npV4, "10.128.0.4")}, nil),
	}, {
		name: "service-missing-not-lb-or-no-ingress",
		in: planInput(
			[]*egressv1.EgressService{
				planES("ns", "gone", planNode, npLB, "100"),
				planES("ns", "clusterip", planNode, npLB, "100"),
				planES("ns", "noingress", planNode, npLB, "100"),
			},
			[]*corev1.Service{
				planSvc("ns", "clusterip", dual, []string{"5.5.5.5"}, npType(corev1.ServiceTypeClusterIP)),
				planSvc("ns", "noingress", dual, nil),
			},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "gone", npV4, "10.128.0.3"), planSlice("ns", "clusterip", npV4, "10.128.0.4"),
				planSlice("ns", "noingress", npV4, "10.128.0.5")}, nil),
	}, {
		// ovn-k §4.3 case 3: SNAT plus Network for two services; rules from
		// endpoints and ClusterIPs, the ETP=Local service gets the sport rule.
		name: "snat-and-network-two-services",
		in: planInput(
			[]*egressv1.EgressService{
				planES("namespace1", "service1", planNode, npLB, "mynetwork"),
				planES("namespace1", "service2", planNode, npLB, "200"),
			},
			[]*corev1.Service{
				planSvc("namespace1", "service1", []string{"10.96.0.10"}, []string{"5.5.5.5"}, npETPLocal(30300)),
				planSvc("namespace1", "service2", []string{"10.96.0.11"}, []string{"6.6.6.6"}),
			},
			[]*discoveryv1.EndpointSlice{
				planSlice("namespace1", "service1", npV4, "10.128.0.3@node1", "192.168.18.15@node1"),
				planSlice("namespace1", "service2", npV4, "10.128.0.4@node2"),
			}, map[string]uint32{"mynetwork": 100}),
		wantRules: []string{
			"v4 5000: from 10.96.0.10 lookup 100",
			"v4 5000: from 10.96.0.11 lookup 200",
			"v4 5000: from 10.128.0.3 lookup 100",
			"v4 5000: from 10.128.0.4 lookup 200",
			"v4 5000: from 169.254.169.3 sport 30300 lookup 100",
		},
		wantSNAT: []string{
			"v4 10.128.0.3 : 5.5.5.5  # namespace1/service1",
			"v4 10.128.0.4 : 6.6.6.6  # namespace1/service2",
		},
		wantReport: []string{"namespace1/service1", "namespace1/service2"},
	}, {
		name: "network-name-not-found",
		in: planInput(
			[]*egressv1.EgressService{planES("ns", "blue", planNode, npLB, "blue"), planES("ns", "ok", planNode, npLB, "")},
			[]*corev1.Service{planSvc("ns", "blue", dual, []string{"5.5.5.5"}), planSvc("ns", "ok", dual, []string{"6.6.6.6"})},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "blue", npV4, "10.128.0.3"), planSlice("ns", "ok", npV4, "10.128.0.4")},
			map[string]uint32{"red": 100}),
		wantSNAT:     []string{"v4 10.128.0.4 : 6.6.6.6  # ns/ok"},
		wantReport:   []string{"ns/ok"},
		wantProblems: []string{"ns/blue NetworkNotFound"},
	}, {
		name: "network-invalid-number",
		in: planInput(
			[]*egressv1.EgressService{planES("ns", "zero", planNode, npLB, "0"), planES("ns", "huge", planNode, npLB, "4294967296")},
			[]*corev1.Service{planSvc("ns", "zero", dual, []string{"5.5.5.5"}), planSvc("ns", "huge", dual, []string{"6.6.6.6"})},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "zero", npV4, "10.128.0.3"), planSlice("ns", "huge", npV4, "10.128.0.4")}, nil),
		wantProblems: []string{"ns/huge InvalidNetwork", "ns/zero InvalidNetwork"},
	}, {
		// ovn-k §4.3 case 4: host ALL → rules for this node's endpoints, the
		// ClusterIPs and the node-port rule; no SNAT.
		name: "network-host-all-local-endpoints-only",
		in: planInput(
			[]*egressv1.EgressService{planES("namespace1", "service1", translate.HostAll, egressv1.Network, "mynetwork")},
			[]*corev1.Service{planSvc("namespace1", "service1", dual, []string{"5.5.5.5", "5:5::5"}, npETPLocal(30300))},
			[]*discoveryv1.EndpointSlice{
				planSlice("namespace1", "service1", npV4, "10.128.0.3@node1", "10.128.0.4@node2", "10.128.0.5", "192.168.18.15@node1"),
				planSlice("namespace1", "service1", npV6, "fe00:10:128::3@node1", "fe00:10:128::4@node2"),
			}, map[string]uint32{"mynetwork": 100}),
		wantRules: []string{
			"v4 5000: from 10.96.0.10 lookup 100",
			"v4 5000: from 10.128.0.3 lookup 100",
			"v4 5000: from 169.254.169.3 sport 30300 lookup 100",
			"v6 5000: from fd00:96::10 lookup 100",
			"v6 5000: from fd69::3 sport 30300 lookup 100",
			"v6 5000: from fe00:10:128::3 lookup 100",
		},
		wantReport: []string{"namespace1/service1"},
	}, {
		name: "host-all-without-network-is-reported-with-nothing-to-program",
		in: planInput(
			[]*egressv1.EgressService{planES("ns", "n", translate.HostAll, egressv1.Network, "")},
			[]*corev1.Service{planSvc("ns", "n", dual, []string{"5.5.5.5"})},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "n", npV4, "10.128.0.3@node1")}, nil),
		wantReport: []string{"ns/n"},
	}, {
		// Only families with an ingress IP are SNATed and get node-port rules;
		// their endpoints are what the master reroutes (AgentEndpoints).
		name: "family-without-ingress-ip",
		in: planInput(
			[]*egressv1.EgressService{planES("ns", "v4only", planNode, npLB, "100")},
			[]*corev1.Service{planSvc("ns", "v4only", dual, []string{"5.5.5.5"}, npETPLocal(30300, 30301))},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "v4only", npV4, "10.128.0.3"), planSlice("ns", "v4only", npV6, "fe00::3")}, nil),
		wantRules: []string{
			"v4 5000: from 10.96.0.10 lookup 100",
			"v4 5000: from 10.128.0.3 lookup 100",
			"v4 5000: from 169.254.169.3 sport 30300 lookup 100",
			"v4 5000: from 169.254.169.3 sport 30301 lookup 100",
			"v6 5000: from fd00:96::10 lookup 100",
		},
		wantSNAT:   []string{"v4 10.128.0.3 : 5.5.5.5  # ns/v4only"},
		wantReport: []string{"ns/v4only"},
	}, {
		name: "network-mode-on-named-host-does-not-snat",
		in: planInput(
			[]*egressv1.EgressService{planES("ns", "n", planNode, egressv1.Network, "7")},
			[]*corev1.Service{planSvc("ns", "n", []string{"10.96.0.10"}, []string{"5.5.5.5"})},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "n", npV4, "10.128.0.3")}, nil),
		wantRules:  []string{"v4 5000: from 10.96.0.10 lookup 7", "v4 5000: from 10.128.0.3 lookup 7"},
		wantReport: []string{"ns/n"},
	}, {
		// One pod IP in two services hosted here: "a/x" < "b/y" keeps it.
		name: "shared-endpoint-first-key-wins",
		in: planInput(
			[]*egressv1.EgressService{planES("b", "y", planNode, npLB, "200"), planES("a", "x", planNode, npLB, "100")},
			[]*corev1.Service{planSvc("a", "x", []string{"10.96.0.10"}, []string{"5.5.5.5"}),
				planSvc("b", "y", []string{"10.96.0.11"}, []string{"6.6.6.6"})},
			[]*discoveryv1.EndpointSlice{planSlice("a", "x", npV4, "10.128.0.3"),
				planSlice("b", "y", npV4, "10.128.0.3", "10.128.0.4")}, nil),
		wantRules: []string{
			"v4 5000: from 10.96.0.10 lookup 100",
			"v4 5000: from 10.96.0.11 lookup 200",
			"v4 5000: from 10.128.0.3 lookup 100",
			"v4 5000: from 10.128.0.4 lookup 200",
		},
		wantSNAT: []string{
			"v4 10.128.0.3 : 5.5.5.5  # a/x",
			"v4 10.128.0.4 : 6.6.6.6  # b/y",
		},
		wantReport:   []string{"a/x", "b/y"},
		wantProblems: []string{"b/y SharedEndpoint"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := NodePlan(tc.in)
			if got := npStrs(out.Desired.Rules); !slices.Equal(got, npNonNil(tc.wantRules)) {
				t.Errorf("rules:\ngot  %q\nwant %q", got, tc.wantRules)
			}
			if got := npStrs(out.Desired.SNAT); !slices.Equal(got, npNonNil(tc.wantSNAT)) {
				t.Errorf("snat:\ngot  %q\nwant %q", got, tc.wantSNAT)
			}
			var keys []string
			for k := range out.Report() {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if !slices.Equal(keys, tc.wantReport) {
				t.Errorf("report keys: got %q; want %q", keys, tc.wantReport)
			}
			if got := npReasons(out.Problems); !slices.Equal(got, npNonNil(tc.wantProblems)) {
				t.Errorf("problems: got %q; want %q", got, tc.wantProblems)
			}
			npCheckGolden(t, tc.name, renderNodePlan(out))
			// Pure: the same input gives the same output.
			if again := renderNodePlan(NodePlan(tc.in)); again != renderNodePlan(out) {
				t.Errorf("plan is not deterministic")
			}
		})
	}
}

func npNonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// TestNodePlanReportMatchesMaster: the report carries exactly what the
// master recomputes: ReportIPs of the Service's ingress IPs (when the node
// SNATs), spec.network, and EndpointsHash(AgentEndpoints) over the
// Service's endpoints before shared-endpoint claims — also when a family
// with an ingress IP has no endpoint, and for the service that lost an
// endpoint to another.
func TestNodePlanReportMatchesMaster(t *testing.T) {
	svc := planSvc("ns", "s", []string{"10.96.0.10"}, []string{"5.5.5.5", "5:5::5"})
	other := planSvc("a", "first", []string{"10.96.0.11"}, []string{"6.6.6.6"})
	sl := []*discoveryv1.EndpointSlice{planSlice("ns", "s", npV4, "10.128.0.3@node2", "10.128.0.4@node1"),
		planSlice("a", "first", npV4, "10.128.0.4@node1")}
	for _, host := range []string{planNode, translate.HostAll} {
		es := planES("ns", "s", host, npLB, "100")
		first := planES("a", "first", planNode, npLB, "")
		out := NodePlan(planInput([]*egressv1.EgressService{es, first}, []*corev1.Service{svc, other}, sl, nil))
		if len(out.Problems.For("ns/s")) != 1 {
			t.Errorf("host %s: problems %v; want the shared endpoint", host, out.Problems)
		}
		ingress, _ := translate.IngressIPs(svc)
		eps := translate.ServiceEndpoints(svc, sl, planSubnets)
		want := translate.ServiceReport{Network: "100", Endpoints: translate.EndpointsHash(translate.AgentEndpoints(host, planNode, eps, ingress))}
		if host != translate.HostAll {
			want.IngressIPs = translate.ReportIPs(ingress)
		}
		got := out.Report()["ns/s"]
		if !slices.Equal(got.IngressIPs, want.IngressIPs) || got.Network != want.Network || got.Endpoints != want.Endpoints {
			t.Errorf("host %s: report %+v; want %+v", host, got, want)
		}
	}
}

// TestNodePlanSequences walks services through changes and checks the rule
// and element differences between consecutive plans (what the applier adds
// and deletes).
func TestNodePlanSequences(t *testing.T) {
	tables := map[string]uint32{"mynetwork": 100}
	es := planES("namespace1", "service1", planNode, npLB, "mynetwork")
	sl := []*discoveryv1.EndpointSlice{planSlice("namespace1", "service1", npV4, "10.128.0.3@node1")}
	cluster := planSvc("namespace1", "service1", []string{"10.96.0.10"}, []string{"5.5.5.5"})
	local := planSvc("namespace1", "service1", []string{"10.96.0.10"}, []string{"5.5.5.5"}, npETPLocal(30300))
	plan := func(ess []*egressv1.EgressService, svc *corev1.Service) NodeState {
		return NodePlan(planInput(ess, []*corev1.Service{svc}, sl, tables)).Desired
	}
	type step struct {
		name     string
		state    NodeState
		add, del []string
	}
	one := []*egressv1.EgressService{es}
	steps := []step{
		{name: "create ETP=Cluster", state: plan(one, cluster), add: []string{
			"v4 5000: from 10.96.0.10 lookup 100", "v4 5000: from 10.128.0.3 lookup 100",
			"v4 10.128.0.3 : 5.5.5.5  # namespace1/service1"}},
		// ovn-k §4.3 case 5.
		{name: "ETP Cluster -> Local", state: plan(one, local), add: []string{"v4 5000: from 169.254.169.3 sport 30300 lookup 100"}},
		{name: "ETP Local -> Cluster", state: plan(one, cluster), del: []string{"v4 5000: from 169.254.169.3 sport 30300 lookup 100"}},
		{name: "network changes", state: NodePlan(planInput([]*egressv1.EgressService{planES("namespace1", "service1", planNode, npLB, "200")},
			[]*corev1.Service{cluster}, sl, tables)).Desired,
			add: []string{"v4 5000: from 10.96.0.10 lookup 200", "v4 5000: from 10.128.0.3 lookup 200"},
			del: []string{"v4 5000: from 10.96.0.10 lookup 100", "v4 5000: from 10.128.0.3 lookup 100"}},
		{name: "deletion removes all", state: plan(nil, cluster), del: []string{
			"v4 5000: from 10.96.0.10 lookup 200", "v4 5000: from 10.128.0.3 lookup 200",
			"v4 10.128.0.3 : 5.5.5.5  # namespace1/service1"}},
	}
	var prev NodeState
	for _, s := range steps {
		add, del := npStateDiff(prev, s.state)
		if !slices.Equal(add, npNonNil(s.add)) || !slices.Equal(del, npNonNil(s.del)) {
			t.Errorf("%s:\nadd %q; want %q\ndel %q; want %q", s.name, add, s.add, del, s.del)
		}
		prev = s.state
	}
}

func npStateDiff(a, b NodeState) (add, del []string) {
	as := append(npStrs(a.Rules), npStrs(a.SNAT)...)
	bs := append(npStrs(b.Rules), npStrs(b.SNAT)...)
	add, del = []string{}, []string{}
	for _, x := range bs {
		if !slices.Contains(as, x) {
			add = append(add, x)
		}
	}
	for _, x := range as {
		if !slices.Contains(bs, x) {
			del = append(del, x)
		}
	}
	return add, del
}

func TestNodePlanReportReached(t *testing.T) {
	out := NodePlan(planInput(
		[]*egressv1.EgressService{planES("ns", "a", planNode, npLB, "100"), planES("ns", "b", planNode, npLB, "")},
		[]*corev1.Service{planSvc("ns", "a", []string{"10.96.0.10"}, []string{"5.5.5.5"}),
			planSvc("ns", "b", []string{"10.96.0.11"}, []string{"6.6.6.6"})},
		[]*discoveryv1.EndpointSlice{planSlice("ns", "a", npV4, "10.128.0.3"), planSlice("ns", "b", npV4, "10.128.0.4")}, nil))
	// Everything but a's ClusterIP rule was reached: only b is ready.
	reached := out.Desired
	reached.Rules = slices.DeleteFunc(slices.Clone(reached.Rules), func(r IPRule) bool { return r.Src.Addr().String() == "10.96.0.10" })
	got := out.ReportReached(reached)
	if _, ok := got["ns/a"]; ok || len(got) != 1 {
		t.Errorf("report %s; want only ns/b", got.Encode())
	}
	if got := out.ReportReached(NodeState{}); len(got) != 0 {
		t.Errorf("report for nothing reached: %s; want {}", got.Encode())
	}
}

func TestNodePlanClaimEndpoints(t *testing.T) {
	ip := netip.MustParseAddr
	kept, lost := ClaimEndpoints([]EndpointClaim{
		{Key: "ns/c", IPs: []netip.Addr{ip("10.0.0.1"), ip("10.0.0.3")}},
		{Key: "ns/a", IPs: []netip.Addr{ip("10.0.0.2"), ip("10.0.0.1")}},
		{Key: "ns/b", IPs: []netip.Addr{ip("::ffff:10.0.0.2"), ip("10.0.0.4")}},
	})
	want := map[string]string{"ns/a": "[10.0.0.1 10.0.0.2]", "ns/b": "[10.0.0.4]", "ns/c": "[10.0.0.3]"}
	for k, w := range want {
		if got := fmt.Sprint(kept[k]); got != w {
			t.Errorf("kept[%s] = %s; want %s", k, got, w)
		}
	}
	if got := fmt.Sprint(lost); got != "[{10.0.0.2 ns/b ns/a} {10.0.0.1 ns/c ns/a}]" {
		t.Errorf("lost = %s", got)
	}
}

func TestNodePlanNetworkTable(t *testing.T) {
	for _, tc := range []struct {
		in      string
		table   uint32
		numeric bool
		err     bool
	}{
		{"", 0, false, false}, {"100", 100, true, false}, {"0", 0, true, true}, {"4294967295", 4294967295, true, false},
		{"4294967296", 0, true, true}, {"blue", 0, false, false}, {"100a", 0, false, false}, {"-1", 0, false, false},
	} {
		table, numeric, err := NetworkTable(tc.in)
		if table != tc.table || numeric != tc.numeric || (err != nil) != tc.err {
			t.Errorf("NetworkTable(%q) = %d, %v, %v; want %d, %v, err=%v", tc.in, table, numeric, err, tc.table, tc.numeric, tc.err)
		}
	}
	ess := []*egressv1.EgressService{planES("ns", "a", planNode, npLB, "blue"), planES("ns", "b", translate.HostAll, npLB, "red"),
		planES("ns", "c", "node2", npLB, "green"), planES("ns", "d", planNode, npLB, "100"), planES("ns", "e", planNode, npLB, "blue")}
	if got := NodeNetworkNames(planNode, ess); !slices.Equal(got, []string{"blue", "red"}) {
		t.Errorf("NodeNetworkNames = %q; want [blue red]", got)
	}
}
