package node_test

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/node"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestNodeAgentKubeAPIServer runs the agent as deployed — `ovn-egress node`
// with the dist ServiceAccount's RBAC against a real kube-apiserver, and the
// real kernel inside a "node" network namespace — and checks that the
// readiness report matches what the master expects (testenv.ReportFor), is
// written only once the SNAT and rules exist, and is withdrawn before they
// are removed; that NetworkNotFound reaches the API as an Event; and that
// the health listener accepts on the management IP.
func TestNodeAgentKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, topo, ns := agentKube(t, ctx, ipfamily.V4, ipfamily.V6)
	n := topo.Nodes[0]
	pod4, pod6 := n.PodIP(ipfamily.V4, 5), n.PodIP(ipfamily.V6, 5)
	k.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100", "fc00:f853:ccd:e793::100"},
		pod4.String()+"@"+n.Name, pod6.String()+"@"+n.Name, "172.18.0.50@"+n.Name)
	k.CreateLoadBalancer(t, ns, "nonet", []string{"172.18.0.101"}, n.PodIP(ipfamily.V4, 6).String()+"@"+n.Name)
	created := time.Now()
	k.SetHost(t, ns, "web", n.Name, func(es *egressv1.EgressService) { es.Spec.Network = "100" })
	k.SetHost(t, ns, "nonet", n.Name, func(es *egressv1.EgressService) { es.Spec.Network = "nope" })

	netns := testenv.NewNetNS(t, "oe-kube")
	cfg := startKubeAgent(t, ctx, k, topo, n, netns)

	report := func() translate.Report { return readReport(t, ctx, k, cfg, n.Name) }
	nftTable := func() string { return netns.MustRun(t, "nft", "list", "table", "inet", node.TableName) }
	key := ns + "/web"
	wait(t, "the report lists "+key, func() bool { _, ok := report()[key]; return ok })
	t.Logf("EgressService status.host set → report published: %v", time.Since(created))
	table := nftTable()
	for _, s := range []string{pod4.String() + ` comment "` + key + `" : 172.18.0.100`, pod6.String() + ` comment "` + key + `" : fc00:f853:ccd:e793::100`} {
		if !strings.Contains(table, s) {
			t.Errorf("nft table lacks %q:\n%s", s, table)
		}
	}
	if strings.Contains(table, "172.18.0.50") {
		t.Errorf("host-networked endpoint programmed:\n%s", table)
	}
	if r := netns.MustRun(t, "ip", "-6", "rule", "show"); !strings.Contains(r, "5000:\tfrom "+pod6.String()+" lookup 100") {
		t.Errorf("ip -6 rule:\n%s", r)
	}
	want := k.ReportFor(t, n.Name, ns, "web", topo.ClusterSubnets)
	got := report()[key]
	if strings.Join(got.IngressIPs, ",") != strings.Join(want.IngressIPs, ",") || got.Network != want.Network || got.Endpoints != want.Endpoints {
		t.Errorf("report %+v; the master expects %+v", got, want)
	}
	if _, ok := report()[ns+"/nonet"]; ok {
		t.Errorf("a service whose network is not found was reported")
	}

	wait(t, "a NetworkNotFound Event", func() bool {
		evs, err := k.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == string(nodeplan.ReasonNetworkNotFound) && e.InvolvedObject.Name == "nonet" && e.Type == "Warning" &&
				e.Source.Component == node.EventSource && strings.Contains(e.Message, n.Name) && strings.Contains(e.Message, `"nope"`) {
				return true
			}
		}
		return false
	})

	// A gateway config that cannot be read is not used: the agent says so
	// on its own Node, once.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"{not json"}}}`, translate.AnnotL3GatewayCfg)
	if _, err := k.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, "a NodeAnnotationInvalid Event on the Node", func() bool {
		evs, err := k.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == string(translate.ReasonNodeAnnotationInvalid) && e.InvolvedObject.Kind == "Node" &&
				e.InvolvedObject.Name == n.Name && e.Type == "Warning" && e.Source.Component == node.EventSource &&
				strings.Contains(e.Message, translate.AnnotL3GatewayCfg) {
				return true
			}
		}
		return false
	})

	// Health: the listener is bound (freely) to the management IP and
	// accepts once the address exists in the namespace.
	mgmt := n.MgmtIPs()[0]
	netns.Addr(t, "lo", mgmt.String()+"/32")
	err := netnsDial(netns, netip.AddrPortFrom(mgmt, uint16(cfg.HealthCheckPort)))
	if err != nil {
		t.Errorf("health listener on %s: %v", mgmt, err)
	}

	// Removal: the report is withdrawn while the state still exists; the
	// state goes after the grace.
	if err := k.Egress.K8sV1().EgressServices(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(t, "the withdrawal", func() bool { _, ok := report()[key]; return !ok })
	withdrawnAt := time.Now()
	if table := nftTable(); !strings.Contains(table, pod4.String()) {
		t.Errorf("SNAT removed before the grace after the withdrawal:\n%s", table)
	}
	snatMap := func() string { return netns.MustRun(t, "nft", "list", "map", "inet", node.TableName, "snat-v4") }
	wait(t, "the SNAT element removed", func() bool { return !strings.Contains(snatMap(), pod4.String()) })
	t.Logf("withdrawal → removal: %v (grace %v)", time.Since(withdrawnAt), cfg.WithdrawGrace)
	if r := netns.MustRun(t, "ip", "-6", "rule", "show"); strings.Contains(r, pod6.String()) {
		t.Errorf("rule left after removal:\n%s", r)
	}
}

// agentKube is a test API server with the agents' namespace and RBAC from
// dist/, one node of the families, and a namespace for the test's objects.
func agentKube(t *testing.T, ctx context.Context, fams ...ipfamily.Family) (*testenv.Kube, testenv.Topology, string) {
	t.Helper()
	k := testenv.NewKube(t)
	for _, f := range []string{"../../dist/namespace.yaml", "../../dist/node/rbac.yaml"} {
		if err := k.Apply(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	topo := testenv.DefaultTopology(1, fams...)
	k.CreateNodes(t, topo)
	return k, topo, k.Namespace(t)
}

// startKubeAgent runs `ovn-egress node` for n in netns as deployed: with
// the dist ServiceAccount's token against the test API server, an empty
// rt_tables, the health listener on; it stops at the test's end (an error
// of RunAgent fails the test).
func startKubeAgent(t *testing.T, ctx context.Context, k *testenv.Kube, topo testenv.Topology, n testenv.TopologyNode, netns *testenv.NetNS, opts ...func(*node.Config)) node.Config {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	sa, err := k.ServiceAccountConfig(ctx, "ovn-egress", "ovn-egress-node")
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	egress, err := versioned.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	rt := filepath.Join(t.TempDir(), "rt_tables")
	if err := os.WriteFile(rt, []byte("254 main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.NodeName, cfg.NetNS, cfg.RTTables = n.Name, netns.Name, rt
	cfg.ClusterSubnets = topo.ClusterSubnets
	// Long enough that a loaded machine still reads the SNAT between the
	// withdrawal and the grace's end (the test polls the API and forks nft).
	cfg.WithdrawGrace = 3 * time.Second
	cfg.HealthListen = true
	for _, o := range opts {
		o(&cfg)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	done := make(chan error, 1)
	go func() { done <- node.RunAgent(ctx, cfg, kube, egress, nil, logrus.NewEntry(log)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunAgent: %v", err)
		}
	})
	return cfg
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func netnsDial(ns *testenv.NetNS, ap netip.AddrPort) error {
	return ns.Do(func() error {
		c, err := net.DialTimeout("tcp", ap.String(), 2*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// readReport reads the agent's report of a node (nil before there is one).
func readReport(t *testing.T, ctx context.Context, k *testenv.Kube, cfg node.Config, nodeName string) translate.Report {
	t.Helper()
	cmName, _ := translate.ReportConfigMapName(nodeName)
	cm, err := k.Client.CoreV1().ConfigMaps(cfg.ReportNamespace).Get(ctx, cmName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	r, err := translate.ParseReport(cm.Data[translate.ReportDataKey])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nodeWarning reports whether a Warning of reason whose message contains
// text is recorded on the Node.
func nodeWarning(t *testing.T, ctx context.Context, k *testenv.Kube, nodeName, reason, text string) func() bool {
	return func() bool {
		evs, err := k.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == reason && e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == nodeName &&
				e.Type == "Warning" && strings.Contains(e.Message, text) {
				return true
			}
		}
		return false
	}
}
