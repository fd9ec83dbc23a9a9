package master_test

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"maps"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Host selection in the full master: real NB and API server, both
// controllers under one Lease.

func (c *cluster) host(name string) string {
	es, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return es.Status.Host
}

// egressLabels returns every node's egress-service labels.
func (c *cluster) egressLabels() map[string]string {
	out := map[string]string{}
	for _, n := range c.topo.Nodes {
		node, err := kube.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		for k := range node.Labels {
			if hosts.IsNodeLabel(k) {
				out[k] = n.Name
			}
		}
	}
	return out
}

// createService creates a LoadBalancer Service with one endpoint and its
// EgressService (status left to the master).
func (c *cluster) createService(name, ingress, ep string) {
	c.t.Helper()
	kube.CreateLoadBalancer(c.t, c.ns, name, []string{ingress}, ep)
	if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Create(context.Background(), testenv.EgressService(c.ns, name, ""), metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// allReachable is a prober for which every node answers.
type allReachable struct{}

func (allReachable) Probe(context.Context, string, []netip.Addr) error { return nil }

// TestLeaderChangeDoesNotFlapHosts: two masters on one Lease; the first
// assigns hosts and labels, the second takes over when the first stops and
// adopts them all: no status.host changes (watched from before the second
// master starts until it has converged) and no label patch.
func TestLeaderChangeDoesNotFlapHosts(t *testing.T) {
	c := newCluster(t)
	for i := range 4 {
		c.createService(fmt.Sprintf("svc%d", i), fmt.Sprintf("172.18.0.%d", 100+i), fmt.Sprintf("10.244.%d.%d@node%d", i%3+1, 10+i, i%3+1))
	}
	cfg := c.config("noflap")
	cfg.Select = selection.Config{HealthInterval: 100 * time.Millisecond, Prober: allReachable{}}
	_, stop1 := c.start(cfg, kube.Config)
	want := map[string]string{"svc0": "node1", "svc1": "node2", "svc2": "node3", "svc3": "node1"}
	c.eventually("hosts assigned", func() bool {
		for name, h := range want {
			if c.host(name) != h {
				return false
			}
		}
		return true
	})
	c.eventually("labels", func() bool { return len(c.egressLabels()) == 4 })
	labels := c.egressLabels()

	w, err := kube.Egress.K8sV1().EgressServices(c.ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var flaps []string
	go func() {
		for ev := range w.ResultChan() {
			if es, ok := ev.Object.(*egressv1.EgressService); ok && ev.Type == watch.Modified && es.Status.Host != want[es.Name] {
				mu.Lock()
				flaps = append(flaps, es.Name+"→"+es.Status.Host)
				mu.Unlock()
			}
		}
	}()

	cfg2 := c.config("noflap")
	cfg2.Select = cfg.Select
	m2, _ := c.start(cfg2, kube.Config)
	time.Sleep(500 * time.Millisecond)
	if st := m2.Select().Stats(); st.Syncs != 0 {
		t.Fatalf("the standby selected hosts while the leader held the lease: %+v", st)
	}
	stop1()
	c.eventually("standby leads and converges", func() bool {
		return m2.Select().Stats().Syncs > 0 && m2.Select().Idle() && m2.Select().HealthRounds() > 2
	})
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(flaps) != 0 {
		t.Errorf("hosts flapped during the leader change: %v", flaps)
	}
	if st := m2.Select().Stats(); st.StatusWrites != 0 || st.LabelPatches != 0 || st.Errors != 0 {
		t.Errorf("the new leader wrote: %+v", st)
	}
	if got := c.egressLabels(); !maps.Equal(got, labels) {
		t.Errorf("labels changed: %v → %v", labels, got)
	}
}

// nsDial dials from inside a network namespace.
func nsDial(ns *testenv.NetNS) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var conn net.Conn
		err := ns.Do(func() error {
			var d net.Dialer
			var err error
			conn, err = d.DialContext(ctx, network, address)
			return err
		})
		return conn, err
	}
}

// TestFailoverEndToEnd: the full master with the real TCP prober at the
// default settings (mode any, port 9, interval 1 s, timeout 1 s). The
// nodes' management addresses live in a network namespace the test made
// (where the prober dials); nothing listens, so every node answers with a
// reset. Then the host's packets are dropped: within interval + timeout
// plus one sync, status.host and the NB rows (read with ovn-nbctl) name
// the new host.
func TestFailoverEndToEnd(t *testing.T) {
	c := newCluster(t)
	ns := testenv.NewNetNS(t, "oe-mgmt")
	for _, n := range c.topo.Nodes {
		for _, ip := range n.MgmtIPs() {
			ns.Addr(t, "lo", ip.String()+"/32")
		}
	}
	ns.MustRun(t, "nft", "add", "table", "inet", "failover")
	ns.MustRun(t, "nft", "add", "chain", "inet", "failover", "in", "{ type filter hook input priority 0 ; }")

	c.createService("web", "172.18.0.100", "10.244.3.5@node3")
	sel := selection.DefaultConfig()
	sel.Prober = &selection.TCPProber{Port: sel.HealthCheckPort, Mode: sel.HealthCheckMode, Dial: nsDial(ns)}
	cfg := c.config("failover")
	cfg.Select = sel
	m, _ := c.start(cfg, kube.Config)
	c.eventually("web on node1", func() bool { return c.host("web") == "node1" })
	report := translate.Report{c.ns + "/web": kube.ReportFor(t, "node1", c.ns, "web", c.topo.ClusterSubnets)}
	for _, n := range c.topo.Nodes {
		kube.SetReport(t, n.Name, report)
	}
	c.eventually("endpoint rerouted to node1", func() bool {
		return c.setAddresses("node1") == `["10.244.3.5"]` && c.ovn.ReroutesTo(t, "10.244.1.2")
	})
	c.eventually("node1 probed", func() bool { return m.Select().HealthRounds() > 1 })
	if h := c.host("web"); h != "node1" {
		t.Fatalf("web moved to %s before any failure", h)
	}

	start := time.Now()
	ns.MustRun(t, "nft", "add", "rule", "inet", "failover", "in", "ip", "daddr", "10.244.1.2", "drop")
	var hostAt, nbAt time.Duration
	deadline := start.Add(10 * time.Second)
	for hostAt == 0 || nbAt == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no failover within 10 s: host %q, node2 set %s, node1 set %s", c.host("web"), c.setAddresses("node2"), c.setAddresses("node1"))
		}
		if hostAt == 0 && c.host("web") == "node2" {
			hostAt = time.Since(start)
		}
		if nbAt == 0 && c.setAddresses("node2") == `["10.244.3.5"]` && !strings.Contains(c.setAddresses("node1"), "10.244.3.5") &&
			c.ovn.ReroutesTo(t, "10.244.2.2") {
			nbAt = time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// How fast is measured by make bench (docs/performance.md), not
	// asserted here: a loaded machine would fail a wall-clock bound.
	t.Logf("failover: status.host after %v, NB rows after %v", hostAt.Round(time.Millisecond), nbAt.Round(time.Millisecond))
	// The label follows status.host in the node's own sync.
	c.eventually("the label on node2 alone", func() bool {
		labels := c.egressLabels()
		return labels[hosts.NodeLabel(c.ns, "web")] == "node2" && len(labels) == 1
	})
	es, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.eventually("HostUnreachable event", func() bool {
		evs, err := kube.Client.CoreV1().Events(c.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(es.UID)})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == string(hosts.ReasonHostUnreachable) {
				return true
			}
		}
		return false
	})
}

// TestADrainIsRepointedInOneSync: when a host dies, selection writes the
// status.host of each of its services; translation waits for those writes
// (the HostMoves gate) and repoints them together, instead of syncing at
// every echo, each sync walking the hosts the ones before it walked.
func TestADrainIsRepointedInOneSync(t *testing.T) {
	c := newCluster(t)
	const n = 90
	for i := range n {
		name := fmt.Sprintf("web%02d", i)
		kube.CreateLoadBalancer(t, c.ns, name, []string{"172.18.0.100"}, fmt.Sprintf("10.244.3.%d@node3", 10+i))
		if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Create(context.Background(), testenv.EgressService(c.ns, name, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prober := &deadNodes{dead: map[string]bool{}, probed: map[string]bool{}}
	sel := selection.DefaultConfig()
	sel.Prober = prober
	cfg := c.config("drain")
	cfg.Select = sel
	cfg.Translation.Translate.AssumeAgentsReady = true
	cfg.Translation.HostMovesBound = 20 * time.Second // the gate alone decides, however slow the machine
	m, _ := c.start(cfg, kube.Config)
	onNode1 := func() (k int) {
		for i := range n {
			if c.host(fmt.Sprintf("web%02d", i)) == "node1" {
				k++
			}
		}
		return k
	}
	c.eventually("every service placed, a third on node1", func() bool { return onNode1() == n/3 })
	// Every host's set written, not node1's alone: a later write to node2
	// or node3 would count against the drain.
	c.eventually("every host's set", func() bool {
		for _, h := range []string{"node1", "node2", "node3"} {
			if strings.Count(c.setAddresses(h), "10.244.3.") != n/3 {
				return false
			}
		}
		return true
	})
	c.eventually("idle", func() bool { return m.Translation().Idle() && m.Select().HealthRounds() > 1 })
	before := m.Translation().Stats()

	prober.kill("node1")
	c.eventually("node1 drained in NB", func() bool {
		gone := c.setAddresses("node1") // the set goes with its last service
		return (gone == "" || gone == "[]") && strings.Count(c.setAddresses("node2")+c.setAddresses("node3"), "10.244.3.") == n
	})
	c.eventually("idle", m.Translation().Idle)
	after := m.Translation().Stats()
	// Selection may take the drain's keys in two batches (the first key
	// wakes its worker alone); each batch is one NB transaction at most
	// (syncs that find nothing to write, such as the echo of the deleted
	// set, do not count).
	if txns := after.Transactions - before.Transactions; txns > 2 {
		t.Errorf("a drain of %d services took %d NB transactions; want at most 2 (one per selection batch)", n/3, txns)
	}
	// The syncs translate the moved services; the others of node2 and
	// node3 stay as they were (translating the hosts would take all n).
	translated := after.Services - before.Services
	if translated < n/3 || translated >= n {
		t.Errorf("a drain of %d services translated %d services; want its moved services only", n/3, translated)
	}
	t.Logf("drain of %d services: %d syncs, %d NB transactions, %d services translated", n/3, after.Syncs-before.Syncs,
		after.Transactions-before.Transactions, translated)
}
