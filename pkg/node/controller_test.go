package node

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/knftables"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

const testNode = "node1"

func testNodeObj(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		translate.AnnotNodeSubnets: `{"default":["10.128.1.0/24"]}`}}}
}

func testES(ns, name, host, network string) *egressv1.EgressService {
	return &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: egressv1.EgressServiceSpec{Network: network}, Status: egressv1.EgressServiceStatus{Host: host}}
}

func testSvc(ns, name, clusterIP, ingress string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: ingress}}}}}
}

func testSlice(ns, svc string, ips ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, AddressType: discoveryv1.AddressTypeIPv4}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return s
}

// patchRecord is one write of the readiness report, with the owned state
// at the moment of the write.
type patchRecord struct {
	at     time.Time
	report translate.Report
	nft    string
	rules  string
}

type agentFixture struct {
	kube    *k8sfake.Clientset
	egress  *egressfake.Clientset
	nl      *FakeNetlink
	nft     *knftables.Fake
	rec     *record.FakeRecorder
	c       *Controller
	mu      sync.Mutex
	patches []patchRecord
}

func newAgentFixture(t *testing.T, cfg Config, kubeObjs []runtime.Object, egressObjs []runtime.Object) *agentFixture {
	t.Helper()
	f := &agentFixture{kube: k8sfake.NewSimpleClientset(kubeObjs...), egress: egressfake.NewSimpleClientset(egressObjs...),
		nl: NewFakeNetlink(), nft: knftables.NewFake(knftables.InetFamily, TableName), rec: record.NewFakeRecorder(100)}
	f.nl.AddRoute(routeInTable(100))
	f.kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var p struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil {
			t.Errorf("patch is not a JSON merge patch: %v", err)
		}
		if v, ok := p.Metadata.Annotations[translate.ReportAnnotation]; len(p.Metadata.Annotations) != 1 || !ok || v != nil {
			t.Errorf("Node patch touches %v; want only the removal of the older release's report annotation", p.Metadata.Annotations)
		}
		return false, nil, nil
	})
	record := func(data map[string]string) {
		if data[translate.ReportNodeKey] != cfg.NodeName {
			t.Errorf("report ConfigMap names node %q, want %s", data[translate.ReportNodeKey], cfg.NodeName)
		}
		r, err := translate.ParseReport(data[translate.ReportDataKey])
		if err != nil {
			t.Error(err)
		}
		f.mu.Lock()
		f.patches = append(f.patches, patchRecord{at: time.Now(), report: r, nft: f.nft.Dump(), rules: f.nl.Dump()})
		f.mu.Unlock()
	}
	f.kube.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap)
		if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "Node" || cm.OwnerReferences[0].Name != cfg.NodeName {
			t.Errorf("report ConfigMap owners %v, want the Node %s", cm.OwnerReferences, cfg.NodeName)
		}
		record(cm.Data)
		return false, nil, nil
	})
	f.kube.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var p struct {
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil {
			t.Errorf("patch is not a JSON merge patch: %v", err)
		}
		record(p.Data)
		return false, nil, nil
	})
	a, err := NewApplier(cfg.applierConfig(), f.nl, f.nft, mapSysctl{"net/ipv4/ip_forward": "1", "net/ipv6/conf/all/forwarding": "1"}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	rt := filepath.Join(t.TempDir(), "rt_tables")
	if err := os.WriteFile(rt, []byte("100 red\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.c, err = NewController(cfg, Deps{Kube: f.kube, Egress: f.egress, Namespace: HostNamespace(), Applier: a,
		Resolver: NewTableResolver(f.nl, rt), Netlink: f.nl, Recorder: f.rec}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return f
}

func (f *agentFixture) patchesCopy() []patchRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]patchRecord(nil), f.patches...)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.NodeName = testNode
	cfg.ClusterSubnets = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/16")}
	cfg.WithdrawGrace = 300 * time.Millisecond
	cfg.ResyncInterval = 0
	return cfg
}

// TestNodeAgentReportOrdering: the report entry appears only once the SNAT
// element and rules exist; when the service leaves the node the entry is
// withdrawn while they still exist, and they go only after the grace.
func TestNodeAgentReportOrdering(t *testing.T) {
	ctx := context.Background()
	es := testES("ns", "svc", testNode, "red")
	f := newAgentFixture(t, testConfig(),
		[]runtime.Object{testNodeObj(testNode), testSvc("ns", "svc", "10.96.0.10", "5.5.5.5"), testSlice("ns", "svc", "10.128.1.5", "192.168.0.9")},
		[]runtime.Object{es})

	eventually(t, "the report lists ns/svc", func() bool {
		ps := f.patchesCopy()
		return len(ps) > 0 && len(ps[len(ps)-1].report) == 1
	})
	first := f.patchesCopy()[0]
	if !strings.Contains(first.nft, `10.128.1.5 comment "ns/svc" : 5.5.5.5`) ||
		!strings.Contains(first.rules, "from 10.128.1.5 lookup 100") || !strings.Contains(first.rules, "from 10.96.0.10 lookup 100") {
		t.Fatalf("report written before the state existed; nft:\n%s\nrules:\n%s", first.nft, first.rules)
	}
	if strings.Contains(first.nft, "192.168.0.9") {
		t.Errorf("host-networked endpoint programmed:\n%s", first.nft)
	}
	got := first.report["ns/svc"]
	wantEps := translate.EndpointsHash([]netip.Addr{netip.MustParseAddr("10.128.1.5")})
	if strings.Join(got.IngressIPs, ",") != "5.5.5.5" || got.Network != "red" || got.Endpoints != wantEps {
		t.Errorf("report entry %+v; want ips [5.5.5.5], network red, eps %s", got, wantEps)
	}
	cmName, _ := translate.ReportConfigMapName(testNode)
	cm, err := f.kube.CoreV1().ConfigMaps(f.c.cfg.ReportNamespace).Get(ctx, cmName, metav1.GetOptions{})
	if err != nil || cm.Data[translate.ReportDataKey] != first.report.Encode() {
		t.Errorf("report ConfigMap %v (%v), want the report %s", cm, err, first.report.Encode())
	}
	node, err := f.kube.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
	if err != nil || node.Annotations[translate.ReportAnnotation] != "" || node.Annotations[translate.AnnotNodeSubnets] == "" {
		t.Errorf("Node annotations %v (%v): the report is not the Node's any more", node.Annotations, err)
	}

	// The service moves to another node.
	moved := es.DeepCopy()
	moved.Status.Host = "node2"
	if _, err := f.egress.K8sV1().EgressServices("ns").Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the SNAT element is removed", func() bool {
		return !strings.Contains(f.nftDump(), "snat-v4 { 10.128.1.5")
	})
	if !strings.Contains(f.nftDump(), "withdrawn-v4 { 10.128.1.5 }") {
		t.Errorf("the removed endpoint is not in the withdrawn set:\n%s", f.nftDump())
	}
	removedAt := time.Now()
	ps := f.patchesCopy()
	var withdrawal *patchRecord
	for i := range ps {
		if _, ok := ps[i].report["ns/svc"]; !ok && i > 0 {
			withdrawal = &ps[i]
			break
		}
	}
	if withdrawal == nil {
		t.Fatalf("no withdrawal was published: %+v", ps)
	}
	if !strings.Contains(withdrawal.nft, "10.128.1.5") || !strings.Contains(withdrawal.rules, "from 10.128.1.5 lookup 100") {
		t.Errorf("state removed before the withdrawal was published; nft:\n%s\nrules:\n%s", withdrawal.nft, withdrawal.rules)
	}
	if gap := removedAt.Sub(withdrawal.at); gap < f.c.cfg.WithdrawGrace {
		t.Errorf("state removed %v after the withdrawal; want at least the grace %v", gap, f.c.cfg.WithdrawGrace)
	}
	if r := f.nl.Dump(); r != "" {
		t.Errorf("rules left:\n%s", r)
	}
	// Patches are only written on change.
	n := len(f.patchesCopy())
	f.c.enqueue()
	time.Sleep(100 * time.Millisecond)
	if len(f.patchesCopy()) != n {
		t.Errorf("a sync without changes patched the Node")
	}
}

func (f *agentFixture) nftDump() string {
	return f.nft.Dump()
}

// TestNodeAgentNetworkNotFound: a network name that is neither a VRF nor
// in rt_tables programs nothing, is not reported, and raises one Warning
// Event naming the node and the network; a VRF name resolves through
// netlink (the fake: this kernel cannot create VRF devices).
func TestNodeAgentNetworkNotFound(t *testing.T) {
	f := newAgentFixture(t, testConfig(),
		[]runtime.Object{testNodeObj(testNode), testSvc("ns", "blue", "10.96.0.10", "5.5.5.5"), testSlice("ns", "blue", "10.128.1.5"),
			testSvc("ns", "vrf", "10.96.0.11", "6.6.6.6"), testSlice("ns", "vrf", "10.128.1.6")},
		[]runtime.Object{testES("ns", "blue", testNode, "blue"), testES("ns", "vrf", testNode, "tenant")})
	for _, network := range []string{"blue", "tenant"} {
		select {
		case ev := <-f.rec.Events:
			if !strings.Contains(ev, "Warning NetworkNotFound") || !strings.Contains(ev, testNode) || !strings.Contains(ev, `"`+network+`"`) {
				t.Errorf("event %q; want a NetworkNotFound warning naming %s and %s", ev, testNode, network)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no NetworkNotFound event for %s", network)
		}
	}
	if d := f.nftDump(); strings.Contains(d, "10.128.1.5") {
		t.Errorf("SNAT programmed for a service whose network is not found:\n%s", d)
	}
	// The VRF appears (the fake netlink stands in for a kernel with VRFs).
	f.nl.AddLink(fakeVRF("tenant", 300))
	f.nl.AddRoute(routeInTable(300))
	f.c.enqueue()
	eventually(t, "the VRF service is programmed", func() bool {
		return strings.Contains(f.nl.Dump(), "from 10.128.1.6 lookup 300")
	})
	eventually(t, "the report lists only ns/vrf", func() bool {
		ps := f.patchesCopy()
		if len(ps) == 0 {
			return false
		}
		r := ps[len(ps)-1].report
		_, vrf := r["ns/vrf"]
		_, blue := r["ns/blue"]
		return vrf && !blue
	})
	select {
	case ev := <-f.rec.Events:
		t.Errorf("unexpected second event %q (a persisting problem must not repeat)", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

func fakeVRF(name string, table uint32) netlink.Link {
	return &netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: name}, Table: table}
}

func routeInTable(table int) netlink.Route {
	_, dst, _ := net.ParseCIDR("0.0.0.0/0")
	return netlink.Route{Table: table, Dst: dst, Family: netlink.FAMILY_V4}
}
