package master_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.RunWithKube(m, "oe-master-", &kube)) }

func testLogger(t *testing.T) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(testWriter{t})
	l.SetLevel(logrus.InfoLevel)
	return l.WithField("test", t.Name())
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// cluster is a real NB/SB/northd with a 3-node topology and the matching
// Node objects in the package's API server.
type cluster struct {
	t    *testing.T
	ovn  *testenv.OVN
	topo testenv.Topology
	ns   string
}

func newCluster(t *testing.T) *cluster {
	o := testenv.NewOVN(t)
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	o.BuildTopology(t, topo)
	kube.CreateNodes(t, topo)
	if err := kube.Apply(context.Background(), "../../../dist/namespace.yaml"); err != nil {
		t.Fatal(err)
	}
	ns := kube.Namespace(t)
	// Namespaces never finish deleting here (no namespace controller):
	// remove the EgressServices so later tests' nodes do not inherit them.
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	return &cluster{t: t, ovn: o, topo: topo, ns: ns}
}

func (c *cluster) config(lease string) master.Config {
	tc := translate.DefaultConfig()
	tc.ClusterSubnets, tc.JoinSubnets = c.topo.ClusterSubnets, c.topo.JoinSubnets
	return master.Config{
		NB:          ovn.ClientConfig{Addresses: []string{c.ovn.NBAddress()}},
		Translation: translation.Config{Translate: tc},
		LeaderElection: master.LeaderElection{Enabled: true, Namespace: "ovn-egress", Name: lease,
			Identity: lease + "-" + fmt.Sprint(time.Now().UnixNano()), LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond},
	}
}

// start runs a master until the returned stop is called.
func (c *cluster) start(cfg master.Config, rc *rest.Config) (*master.Master, func()) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m, err := master.New(ctx, cfg, rc, testLogger(c.t))
	if err != nil {
		c.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				c.t.Errorf("master: %v", err)
			}
		case <-time.After(20 * time.Second):
			c.t.Errorf("master did not stop")
		}
	}
	c.t.Cleanup(stop)
	return m, stop
}

func (c *cluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			list, _ := c.ovn.NBCtl("list", "Address_Set")
			c.t.Fatalf("timed out waiting for %s; NB address sets:\n%s", what, list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) setAddresses(node string) string {
	out, err := c.ovn.NBCtl("--if-exists", "get", "Address_Set", translate.AddressSetName("ovn-egress:EgressServiceHost:"+node+":v4"), "addresses")
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) policyUUIDs() []string {
	out := c.ovn.MustNBCtl(c.t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy", "external_ids:k8s.ovn.org/owner-controller=ovn-egress")
	u := strings.Fields(out)
	slices.Sort(u)
	return u
}

func saConfig(t *testing.T) *rest.Config { return saConfigOf(t, "../../../dist/master/rbac.yaml") }

// saConfigEgressIP is saConfig with the chart's egressIP.enabled RBAC.
func saConfigEgressIP(t *testing.T) *rest.Config {
	return saConfigOf(t, "../../../dist/egressip/master-rbac.yaml")
}

func saConfigOf(t *testing.T, rbac string) *rest.Config {
	ctx := context.Background()
	if err := kube.Apply(ctx, "../../../dist/namespace.yaml", rbac); err != nil {
		t.Fatal(err)
	}
	rc, err := kube.ServiceAccountConfig(ctx, "ovn-egress", "ovn-egress-master")
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestMasterTranslatesAsServiceAccount runs the master with the dist RBAC's
// ServiceAccount (not an admin): a LoadBalancer Service with endpoints and a
// hand-set status.host becomes NB rows once the host's agent reports it, and
// follows endpoint changes and a withdrawn report.
func TestMasterTranslatesAsServiceAccount(t *testing.T) {
	c := newCluster(t)
	rc := saConfig(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1", "10.244.3.5@node3")
	kube.SetHost(t, c.ns, "web", "node2")
	c.start(c.config("ovn-egress-master"), rc)

	c.eventually("reroute policy to node2", func() bool {
		return c.ovn.ReroutesTo(t, "10.244.2.2")
	})
	if got := c.setAddresses("node2"); got != "[]" {
		t.Fatalf("endpoints rerouted before the agent reported: %s", got)
	}
	key := c.ns + "/web"
	kube.SetReport(t, "node2", translate.Report{key: kube.ReportFor(t, "node2", c.ns, "web", c.topo.ClusterSubnets)})
	c.eventually("endpoints in node2's set", func() bool { return c.setAddresses("node2") == `["10.244.1.5", "10.244.3.5"]` })

	// A new endpoint waits for the agent; a removed one leaves at once.
	kube.SetEndpoints(t, c.ns, "web", "10.244.3.5@node3", "10.244.1.9@node1")
	c.eventually("removed endpoint out", func() bool { return c.setAddresses("node2") == `["10.244.3.5"]` })
	time.Sleep(300 * time.Millisecond)
	if got := c.setAddresses("node2"); got != `["10.244.3.5"]` {
		t.Fatalf("new endpoint rerouted before the agent caught up: %s", got)
	}
	kube.SetReport(t, "node2", translate.Report{key: kube.ReportFor(t, "node2", c.ns, "web", c.topo.ClusterSubnets)})
	c.eventually("new endpoint in", func() bool { return c.setAddresses("node2") == `["10.244.1.9", "10.244.3.5"]` })

	// The agent withdraws: the endpoints leave the set.
	kube.SetReport(t, "node2", translate.Report{})
	c.eventually("withdrawn", func() bool { return c.setAddresses("node2") == "[]" })
}

// TestStandbyTakesOverWithoutRewriting: a second master waits on the Lease,
// takes over when the first stops, and converges without writing anything
// (the rows are already right; no row is deleted and recreated).
func TestStandbyTakesOverWithoutRewriting(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node3")
	kube.SetReport(t, "node3", translate.Report{c.ns + "/web": kube.ReportFor(t, "node3", c.ns, "web", c.topo.ClusterSubnets)})
	cfg := c.config("takeover")
	_, stop1 := c.start(cfg, kube.Config)
	c.eventually("rows", func() bool { return c.setAddresses("node3") == `["10.244.1.5"]` })
	before := c.policyUUIDs()

	cfg2 := c.config("takeover")
	m2, _ := c.start(cfg2, kube.Config)
	time.Sleep(500 * time.Millisecond)
	if st := m2.Translation().Stats(); st.Syncs != 0 {
		t.Fatalf("standby synced while the leader held the lease: %+v", st)
	}
	stop1()
	c.eventually("standby converged", func() bool {
		st := m2.Translation().Stats()
		return st.Syncs > 0 && m2.Translation().Idle()
	})
	if st := m2.Translation().Stats(); st.Changes != 0 || st.Transactions != 0 {
		t.Errorf("takeover wrote to NB: %+v", st)
	}
	if after := c.policyUUIDs(); !slices.Equal(before, after) {
		t.Errorf("policies recreated: %v -> %v", before, after)
	}
	// The new leader keeps converging.
	kube.SetEndpoints(t, c.ns, "web")
	c.eventually("rows removed by the new leader", func() bool { return c.setAddresses("node3") == "" })
}

// TestSharedEndpointAcrossHosts: a pod address behind two EgressServices
// on different hosts is rerouted by the lexically first only; when that one
// goes away, the other host takes it — the master resyncs the other host
// although nothing about its own service changed.
func TestSharedEndpointAcrossHosts(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "a", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.CreateLoadBalancer(t, c.ns, "b", []string{"172.18.0.101"}, "10.244.1.5@node1", "10.244.1.6@node1")
	kube.SetHost(t, c.ns, "a", "node2")
	kube.SetHost(t, c.ns, "b", "node3")
	kube.SetReport(t, "node2", translate.Report{c.ns + "/a": kube.ReportFor(t, "node2", c.ns, "a", c.topo.ClusterSubnets)})
	kube.SetReport(t, "node3", translate.Report{c.ns + "/b": kube.ReportFor(t, "node3", c.ns, "b", c.topo.ClusterSubnets)})
	c.start(c.config("shared"), kube.Config)
	c.eventually("a wins the shared address", func() bool {
		return c.setAddresses("node2") == `["10.244.1.5"]` && c.setAddresses("node3") == `["10.244.1.6"]`
	})
	if err := kube.Egress.K8sV1().EgressServices(c.ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("b takes it over", func() bool {
		return c.setAddresses("node3") == `["10.244.1.5", "10.244.1.6"]` && c.setAddresses("node2") == ""
	})
}

// TestServiceChangesReachNB: the master caches each Service's objects
// between syncs; a change to the Service alone (not its endpoints, not its
// EgressService) must still reach NB. On the gateway backend the
// load-balancer IP is in NB, as the NAT row's external IP: a new ingress IP
// replaces it.
func TestServiceChangesReachNB(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfg := c.config("service-changes")
	cfg.Translation.Translate.Backend = translate.BackendOVN
	c.start(cfg, kube.Config)
	// One NAT row per endpoint (OVN 23.03), or per service with a match
	// (NAT.match, OVN ≥ 24.09): either way it names the service.
	natIP := func() string {
		return strings.TrimSpace(c.ovn.MustNBCtl(t, "--bare", "--columns=external_ip", "find", "NAT", "external_ids:k8s.ovn.org/egress-service="+c.ns+"/web"))
	}
	c.eventually("the NAT row", func() bool { return natIP() == "172.18.0.100" })

	ctx := context.Background()
	svc, err := kube.Client.CoreV1().Services(c.ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "172.18.0.101"}}
	if _, err := kube.Client.CoreV1().Services(c.ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the new ingress IP", func() bool { return natIP() == "172.18.0.101" })
	if host := c.setAddresses("node2"); host != "" {
		t.Errorf("the host path has rows too: %s", host)
	}
}

// TestOwnWritesAreNotSyncedAgainButDriftIs: the echo of the master's own
// address-set write does not make it translate the host again (during a
// drain every write touches most hosts, and every echo re-translated them),
// while anybody else's change to an owned set — an address removed, one
// added, the set destroyed — is put back.
func TestOwnWritesAreNotSyncedAgainButDriftIs(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfg := c.config("echo")
	cfg.Translation.Translate.AssumeAgentsReady = true
	m, _ := c.start(cfg, kube.Config)
	c.eventually("the set", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })
	set := translate.AddressSetName("ovn-egress:EgressServiceHost:node2:v4")
	// settled is exact, not a wait: a drift the master must repair. NB
	// events reach the controller in commit order, so once the repair is in
	// NB every earlier NB event (the echoes of the startup write above all)
	// has been handled; the repair's own echo is as wanted.
	settled := func(want string) translation.SyncStats {
		c.ovn.MustNBCtl(t, "add", "Address_Set", set, "addresses", "10.244.9.8")
		c.eventually("the barrier repaired", func() bool { return c.setAddresses("node2") == want })
		c.eventually("idle", m.Translation().Idle)
		return m.Translation().Stats()
	}

	before := settled(`["10.244.1.5"]`)
	for i := range 4 {
		ep := fmt.Sprintf("10.244.3.%d", 10+i)
		kube.SetEndpoints(t, c.ns, "web", "10.244.1.5@node1", ep+"@node3")
		c.eventually(ep, func() bool { return strings.Contains(c.setAddresses("node2"), ep) })
	}
	after := settled(`["10.244.1.5", "10.244.3.13"]`)
	// Each change and the closing barrier: one transaction; the echo of
	// each write is a sync that finds nothing to write.
	if writes := after.Transactions - before.Transactions; writes != 5 {
		t.Errorf("4 endpoint changes and a repair: %d transactions; want 5", writes)
	}

	want := `["10.244.1.5", "10.244.3.13"]`
	for _, drift := range [][]string{
		{"remove", "Address_Set", set, "addresses", "10.244.1.5"},
		{"add", "Address_Set", set, "addresses", "10.244.9.9"},
		{"destroy", "Address_Set", set},
	} {
		c.ovn.MustNBCtl(t, drift...)
		c.eventually("repaired after "+drift[0], func() bool { return c.setAddresses("node2") == want })
	}
}

// TestAMoveTranslatesTheMovedServices: with 20 services on node2, moving
// two of them to node3 translates those two alone (the other 18 stay in
// node2's set without being translated again); an endpoint change of one
// of the 18 is still seen.
func TestAMoveTranslatesTheMovedServices(t *testing.T) {
	c := newCluster(t)
	var all []string
	for i := range 20 {
		name, ep := fmt.Sprintf("web%02d", i), fmt.Sprintf("10.244.1.%d", 10+i)
		kube.CreateLoadBalancer(t, c.ns, name, []string{"172.18.0.100"}, ep+"@node1")
		kube.SetHost(t, c.ns, name, "node2")
		all = append(all, `"`+ep+`"`)
	}
	cfg := c.config("move")
	cfg.Translation.Translate.AssumeAgentsReady = true
	m, _ := c.start(cfg, kube.Config)
	c.eventually("node2's set", func() bool { return c.setAddresses("node2") == "["+strings.Join(all, ", ")+"]" })
	c.eventually("idle", m.Translation().Idle)
	before := m.Translation().Stats()
	kube.SetHost(t, c.ns, "web00", "node3")
	kube.SetHost(t, c.ns, "web01", "node3")
	c.eventually("node3's set", func() bool { return c.setAddresses("node3") == `["10.244.1.10", "10.244.1.11"]` })
	c.eventually("node2's set", func() bool { return c.setAddresses("node2") == "["+strings.Join(all[2:], ", ")+"]" })
	c.eventually("idle", m.Translation().Idle)
	after := m.Translation().Stats()
	if fresh := after.Services - before.Services; fresh < 2 || fresh > 4 {
		t.Errorf("two moves: %d services translated; want the 2 moved (at most 4: each move may take two syncs)", fresh)
	}
	kube.SetEndpoints(t, c.ns, "web05", "10.244.1.99@node1")
	c.eventually("a kept service's new endpoint", func() bool {
		got := c.setAddresses("node2")
		return strings.Contains(got, `"10.244.1.99"`) && !strings.Contains(got, `"10.244.1.15"`)
	})
}
