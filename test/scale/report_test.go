// Package scale holds tests at the sizes an operator may reach on one host,
// with the product's real parts: a kube-apiserver, OVN's NB, the master's
// translation and the node agent in a network namespace.
package scale

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/node"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// hostedServices is how many services TestHostServes10000Services puts on
// one host: more than one ConfigMap (and far more than one Node annotation,
// the report's old home: about 3,000) can hold.
var hostedServices = 10000

// TestHostServes10000Services: one host serves 10,000 EgressServices with
// the readiness handshake intact. The real agent programs them in its
// node's network namespace and reports them in several ConfigMaps; the
// master reroutes every endpoint to the host only as the report names it;
// then one service more goes through the whole handshake, and one service
// leaves. The durations are logged (the note of issue 17 quotes them).
func TestHostServes10000Services(t *testing.T) {
	if n, err := strconv.Atoi(os.Getenv("OVN_EGRESS_SCALE_SERVICES")); err == nil {
		hostedServices = n // a developer's smaller or larger run
	}
	o, topo, ns := hostCluster(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The shared clients are held to 200 requests/s; this test writes
	// 50,000 objects.
	fast := rest.CopyConfig(kube.Config)
	fast.QPS, fast.Burst = 5000, 10000
	kc, err := kubernetes.NewForConfig(fast)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := egressclient.NewForConfig(fast)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Cleanup(func() { deleteHosted(t, kc, ns) }) // the package's later tests list every Service
	createHosted(t, kc, ec, ns, "node2", 0, hostedServices)
	t.Logf("%d Services, EndpointSlices and EgressServices (status.host node2) written in %v", hostedServices, time.Since(start).Round(time.Millisecond))

	// The agent of node2, as deployed but in process, in node2's namespace.
	netns := testenv.NewNetNS(t, "oe-scale")
	rt := filepath.Join(t.TempDir(), "rt_tables")
	if err := os.WriteFile(rt, []byte("254 main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	acfg := node.DefaultConfig()
	acfg.NodeName, acfg.NetNS, acfg.RTTables = "node2", netns.Name, rt
	acfg.ClusterSubnets = topo.ClusterSubnets
	acfg.ReportNamespace = testenv.ReportNamespace
	acfg.WithdrawGrace = 200 * time.Millisecond
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	if f := os.Getenv("OVN_EGRESS_SCALE_AGENT_LOG"); f != "" {
		lf, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		quiet.SetOutput(lf)
		quiet.SetLevel(logrus.DebugLevel)
	}
	agentDone := make(chan error, 1)
	agentStart := time.Now()
	go func() { agentDone <- node.RunAgent(ctx, acfg, kc, ec, nil, logrus.NewEntry(quiet)) }()
	defer func() {
		cancel()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	tc := translate.DefaultConfig()
	tc.ClusterSubnets, tc.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
	cfg := master.Config{NB: ovn.ClientConfig{Addresses: []string{o.NBAddress()}}, Translation: translation.Config{Translate: tc},
		Controllers: []string{master.ControllerTranslation}, ReportNamespace: testenv.ReportNamespace}
	m, err := master.New(ctx, cfg, fast, logrus.NewEntry(log))
	if err != nil {
		t.Fatal(err)
	}
	masterDone := make(chan error, 1)
	go func() { masterDone <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-masterDone; err != nil {
			t.Errorf("master: %v", err)
		}
	}()

	reported := eventuallyWithin(t, 3*time.Minute, "the agent's report to name every service", func() bool { return len(reportOf(t, "node2")) == hostedServices })
	t.Logf("agent start → all %d services reported: %v", hostedServices, reported.Sub(agentStart).Round(time.Millisecond))
	inNB := eventuallyWithin(t, 3*time.Minute, "every endpoint in node2's set", func() bool { return setSize(t, o, "node2") == hostedServices })
	t.Logf("report complete → every endpoint in node2's reroute set: %v (%d NB transactions)", inNB.Sub(reported).Round(time.Millisecond), m.Translation().Stats().Transactions)
	parts := reportParts(t, "node2")
	total := 0
	for name, n := range parts {
		total += n
		if n > translate.ReportShardBytes {
			t.Errorf("report ConfigMap %s holds %d bytes, more than a part's %d", name, n, translate.ReportShardBytes)
		}
	}
	if want := (total + translate.ReportShardBytes - 1) / translate.ReportShardBytes; len(parts) < want {
		t.Errorf("%d bytes of report in %d ConfigMap(s), want at least %d", total, len(parts), want)
	}
	t.Logf("report: %d ConfigMaps, sizes %v", len(parts), parts)
	if n := nftElements(t, netns); n != hostedServices {
		t.Errorf("the agent's SNAT map holds %d endpoints, want %d", n, hostedServices)
	}

	// One service more: the handshake at this size. Its endpoint is not
	// rerouted before the report names it.
	t.Run("one more", func(t *testing.T) {
		added := time.Now()
		createHosted(t, kc, ec, ns, "node2", hostedServices, 1)
		key := ns + "/" + hostedName(hostedServices)
		var reportedAt time.Time
		ep := hostedEndpoint(hostedServices).String()
		eventuallyWithin(t, time.Minute, "the new service rerouted", func() bool {
			// NB first, the report after: a report published between the
			// two reads is then seen, and a reroute that came before the
			// report is still caught (the report, once there, stays).
			in := strings.Contains(setAddresses(t, o, "node2"), `"`+ep+`"`)
			if reportedAt.IsZero() {
				if _, ok := reportOf(t, "node2")[key]; ok {
					reportedAt = time.Now()
				}
			}
			if in && reportedAt.IsZero() {
				t.Fatalf("%s rerouted before the agent reported %s", ep, key)
			}
			return in
		})
		t.Logf("service %d: created → reported %v, → in NB %v", hostedServices+1, reportedAt.Sub(added).Round(time.Millisecond), time.Since(added).Round(time.Millisecond))
	})

	// One service leaves: out of NB, then its SNAT goes after the grace.
	t.Run("one less", func(t *testing.T) {
		gone := time.Now()
		if err := ec.K8sV1().EgressServices(ns).Delete(ctx, hostedName(0), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		ep := `"` + hostedEndpoint(0).String() + `"`
		eventuallyWithin(t, time.Minute, "the gone service's endpoint out of NB", func() bool { return !strings.Contains(setAddresses(t, o, "node2"), ep) })
		outOfNB := time.Since(gone)
		eventuallyWithin(t, time.Minute, "its report entry withdrawn", func() bool { _, ok := reportOf(t, "node2")[ns+"/"+hostedName(0)]; return !ok })
		t.Logf("service 1 deleted → out of NB %v, → withdrawn from the report %v", outOfNB.Round(time.Millisecond), time.Since(gone).Round(time.Millisecond))
	})
}

func hostedName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// hostedEndpoint is service i's endpoint: 10.244.100.0 onwards, past the
// nodes' own /24s (translation does not care which node's subnet holds it).
func hostedEndpoint(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(100 + i/250), byte(1 + i%250)})
}

// createHosted writes services from..from+n-1 (a LoadBalancer Service with
// its ingress IP, one endpoint on node1, and an EgressService with
// status.host) with 32 writers.
func createHosted(t *testing.T, kc kubernetes.Interface, ec egressclient.Interface, ns, host string, from, n int) {
	t.Helper()
	ctx := context.Background()
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := createOne(ctx, kc, ec, ns, host, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := from; i < from+n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d services not created, first: %v", len(errs), n, errs[0])
	}
}

// deleteHosted removes the namespace's Services (there is no
// deletecollection for them) and EndpointSlices.
func deleteHosted(t *testing.T, kc kubernetes.Interface, ns string) {
	ctx := context.Background()
	_ = kc.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	list, err := kc.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				_ = kc.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
			}
		}()
	}
	for _, s := range list.Items {
		work <- s.Name
	}
	close(work)
	wg.Wait()
}

func createOne(ctx context.Context, kc kubernetes.Interface, ec egressclient.Interface, ns, host string, i int) error {
	name := hostedName(i)
	lb := netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(1 + i%250)})
	want := testenv.LoadBalancerService(ns, name, lb.String())
	noNodePorts := false // 10,000 would exhaust the NodePort range
	want.Spec.AllocateLoadBalancerNodePorts = &noNodePorts
	svc, err := kc.CoreV1().Services(ns).Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	svc.Status = want.Status
	if _, err := kc.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	for _, s := range testenv.EndpointSlices(ns, name, hostedEndpoint(i).String()+"@node1") {
		if _, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	es, err := ec.K8sV1().EgressServices(ns).Create(ctx, testenv.EgressService(ns, name, ""), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	es.Status.Host = host
	_, err = ec.K8sV1().EgressServices(ns).UpdateStatus(ctx, es, metav1.UpdateOptions{})
	return err
}

// reportOf is node's report as the master reads it: the union of its
// report ConfigMaps.
func reportOf(t *testing.T, nodeName string) translate.Report {
	t.Helper()
	list, err := kube.Client.CoreV1().ConfigMaps(testenv.ReportNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: translate.ReportNodeLabel + "=" + translate.ReportNodeHash(nodeName)})
	if err != nil {
		t.Fatal(err)
	}
	all := translate.Report{}
	for i := range list.Items {
		_, _, r, err := translate.ParseReportConfigMap(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range r {
			all[k] = v
		}
	}
	return all
}

// reportParts are node's report ConfigMaps and the bytes of each's report.
func reportParts(t *testing.T, nodeName string) map[string]int {
	t.Helper()
	list, err := kube.Client.CoreV1().ConfigMaps(testenv.ReportNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: translate.ReportNodeLabel + "=" + translate.ReportNodeHash(nodeName)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, cm := range list.Items {
		out[cm.Name] = len(cm.Data[translate.ReportDataKey])
	}
	return out
}

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.RunWithKube(m, "oe-scale-", &kube)) }

// hostCluster is a real NB with a 3-node ovn-kubernetes topology, the
// matching Node objects and a namespace for the services.
func hostCluster(t *testing.T) (*testenv.OVN, testenv.Topology, string) {
	o := testenv.NewOVN(t)
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	o.BuildTopology(t, topo)
	kube.CreateNodes(t, topo)
	if err := kube.Apply(context.Background(), "../../dist/namespace.yaml"); err != nil {
		t.Fatal(err)
	}
	return o, topo, kube.Namespace(t)
}

// setAddresses is node's IPv4 reroute set as ovn-nbctl prints it.
func setAddresses(t *testing.T, o *testenv.OVN, node string) string {
	t.Helper()
	out, err := o.NBCtl("--if-exists", "get", "Address_Set", translate.AddressSetName("ovn-egress:EgressServiceHost:"+node+":v4"), "addresses")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// setSize counts the addresses of node's IPv4 reroute set.
func setSize(t *testing.T, o *testenv.OVN, nodeName string) int {
	out := setAddresses(t, o, nodeName)
	if strings.TrimSpace(out) == "[]" || out == "" {
		return 0
	}
	return strings.Count(out, ",") + 1
}

// nftElements counts the agent's IPv4 SNAT map elements (every LB IP of
// createHosted is in 198.18.0.0/15).
func nftElements(t *testing.T, ns *testenv.NetNS) int {
	t.Helper()
	return strings.Count(ns.MustRun(t, "nft", "list", "map", "inet", node.TableName, "snat-v4"), " : 198.1")
}

// eventuallyWithin waits up to d for cond and returns when it held.
func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now()
}
