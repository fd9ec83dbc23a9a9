package local

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

func anyHost(h string) bool { return h != "" && h != egressv1.HostAll }

// TestEgressWithoutSelector: with no node selector, pods on every node
// leave with the load-balancer IP; traffic to other pods and to node
// addresses is not rerouted; deleting the EgressService gives the pods
// their node's address back. IPv4 and dual-stack.
func TestEgressWithoutSelector(t *testing.T) {
	for _, tc := range []struct {
		fams    []ipfamily.Family
		backend string
	}{{[]ipfamily.Family{ipfamily.V4}, "host"}, {[]ipfamily.Family{ipfamily.V4, ipfamily.V6}, "host"}, {[]ipfamily.Family{ipfamily.V4}, "ovn"}} {
		t.Run(familiesName(tc.fams)+"-"+tc.backend, func(t *testing.T) {
			c := newCluster(t, options{families: tc.fams, backend: tc.backend})
			p1, p2, p3 := c.addPod("p1", "node1", 5), c.addPod("p2", "node2", 5), c.addPod("p3", "node3", 5)
			other := c.addPod("other", "node3", 6) // not behind the Service
			lb := c.service("web", 0, p1, p2, p3)
			before := c.echo.Seen()
			c.expectSource(p1, 10*time.Second, c.nodeAddr("node1"))
			c.egressService("web", egressv1.EgressServiceSpec{})
			host := c.host("web", anyHost)
			t.Logf("host: %s", host)
			for _, p := range []*pod{p1, p2, p3} {
				c.expectSource(p, 15*time.Second, only(lb))
			}
			c.expectSource(other, 5*time.Second, c.nodeAddr("node3"))
			if tc.backend == "host" {
				// The outside reaches the Service through the LB IP on the
				// host, and the backend's replies come back through it.
				c.expectIngress(lb, 10*time.Second)
			}

			// Not rerouted: pod → pod on another node keeps the pod's
			// source; pod → node address leaves through the pod's own GR
			// with its node's address. On the gateway path the host's own
			// GR holds the egress NAT rows: with NAT.match (OVN ≥ 24.09) a
			// row keeps the node's SNAT for traffic to node addresses, so a
			// pod on the host node itself is checked; OVN 23.03's NAT rows
			// cannot match on the destination and a pod on the host reaches
			// node addresses with the LB IP (the documented limit), so
			// there it is checked from another node.
			src := p1
			if tc.backend == "ovn" {
				onHost := testenv.OVNVersion() != testenv.OVN23
				for _, p := range []*pod{p1, p2, p3} {
					if (p.node == host) == onHost {
						src = p
						break
					}
				}
			}
			for _, dst := range other.ips {
				got, _, err := testenv.AskUntil(src.ns, "tcp", netip.AddrPortFrom(dst, echoPort), 5*time.Second)
				if err != nil || !contains(src.ips, got) {
					t.Errorf("pod %s → pod %s: seen %s (%v), want the pod's own address", src.name, dst, got, err)
				}
			}
			target := "node2"
			if src.node == target {
				target = "node3"
			}
			testenv.StartEcho(t, c.dp.Hosts[target], echoPort, hostIPs(c, target)...)
			for _, dst := range hostIPs(c, target) {
				got, _, err := testenv.AskUntil(src.ns, "tcp", netip.AddrPortFrom(dst, echoPort), 5*time.Second)
				if err != nil || contains(lb, got) || !contains(c.nodeAddr(src.node)(ipfamily.Of(dst)), got) {
					t.Errorf("pod %s → %s's address %s: seen %s (%v), want %s's own address", src.name, target, dst, got, err, src.node)
				}
			}

			if err := kube.Egress.K8sV1().EgressServices(c.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*pod{p1, p2, p3} {
				c.expectSource(p, 15*time.Second, c.nodeAddr(p.node))
			}
			_ = before
		})
	}
}

// TestSelectorMovesHost: the selector picks the host; changing it moves the
// host and the traffic; a selector matching no node leaves status.host
// empty and the pods use their node's address; labelling a node to match
// brings the LB IP back. Both SNAT backends.
func TestSelectorMovesHost(t *testing.T) {
	for _, backend := range []string{"host", "ovn"} {
		t.Run(backend, func(t *testing.T) { testSelectorMovesHost(t, backend) })
	}
}

func testSelectorMovesHost(t *testing.T, backend string) {
	// Three selector changes in a row: the master damps a selector move
	// that follows another within --selector-move-damping (30 s by
	// default; its own test is TestSelectorMovesDamped), so the last one
	// takes effect after 2 s here.
	c := newCluster(t, options{backend: backend, masterArgs: []string{"--selector-move-damping=2s"}})
	p1, p3 := c.addPod("p1", "node1", 5), c.addPod("p3", "node3", 5)
	lb := c.service("web", 0, p1, p3)
	c.label("node2", "egress", "a")
	c.label("node3", "egress", "b")
	c.egressService("web", egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "a"}}})
	c.host("web", func(h string) bool { return h == "node2" })
	c.expectSource(p1, 15*time.Second, only(lb))
	c.expectSource(p3, 15*time.Second, only(lb))

	c.viaHost(p1, "node2")
	c.patchSelector("web", map[string]string{"egress": "b"})
	c.host("web", func(h string) bool { return h == "node3" })
	c.eventually("reroute to node3", 15*time.Second, func() bool { return c.reroutesTo("node3") })
	c.expectSource(p1, 15*time.Second, only(lb))
	c.viaHost(p1, "node3")

	c.patchSelector("web", map[string]string{"egress": "nowhere"})
	c.host("web", func(h string) bool { return h == "" })
	c.expectSource(p1, 15*time.Second, c.nodeAddr("node1"))
	c.expectSource(p3, 15*time.Second, c.nodeAddr("node3"))

	// Two moves away from a node, both for the selector; the service waits
	// for an eligible node.
	c.leaderMetric(2, "ovn_egress_host_changes_total", "cause", "selector")
	c.leaderMetric(1, "ovn_egress_egressservices", "state", "unassigned", "reason", "NoEligibleNode")

	c.label("node1", "egress", "nowhere")
	c.host("web", func(h string) bool { return h == "node1" })
	c.expectSource(p3, 15*time.Second, only(lb))
	c.leaderMetric(1, "ovn_egress_egressservices", "state", "assigned", "reason", "")

	// A malformed selector is a problem of that object, in its metric: not a
	// sync error, not a crash.
	errsBefore := c.leaderSyncErrors()
	patch := []byte(`[{"op":"replace","path":"/spec/nodeSelector/matchLabels","value":{"a:b":"c&"}}]`)
	if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Patch(context.Background(), "web", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.host("web", func(h string) bool { return h == "" })
	c.leaderMetric(1, "ovn_egress_egressservices", "state", "unassigned", "reason", "InvalidNodeSelector")
	if after := c.leaderSyncErrors(); after != errsBefore {
		t.Errorf("sync errors %v → %v for a malformed selector", errsBefore, after)
	}
	for i, m := range c.masters {
		if err := m.Exited(); err != nil {
			t.Errorf("master-%d exited: %v", i, err)
		}
	}
}

// TestFailover: the host stops answering the health probe (its agent dies;
// the master probes in connect mode) → another host within the probe
// interval and timeout, and new connections leave with the LB IP through it.
// Both SNAT backends.
func TestFailover(t *testing.T) {
	for _, backend := range []string{"host", "ovn"} {
		t.Run(backend, func(t *testing.T) { testFailover(t, backend, false) })
	}
	t.Run("host-notready", func(t *testing.T) { testFailover(t, "host", true) })
}

// testFailover kills the host's agent (its health listener goes with it),
// or, with notReady, marks the host's Node NotReady.
func testFailover(t *testing.T, backend string, notReady bool) {
	// Connections that move host lose their conntrack state: their next
	// packets are invalid on the new host, and the leak guard drops them.
	c := newCluster(t, options{backend: backend})
	p1 := c.addPod("p1", "node1", 5)
	lb := c.service("web", 0, p1)
	c.egressService("web", egressv1.EgressServiceSpec{})
	old := c.host("web", anyHost)
	c.expectSource(p1, 15*time.Second, only(lb))
	if !notReady {
		// The failover is timed from the host's last answered probe.
		c.leaderMetricAtLeast(1, "ovn_egress_health_probe_duration_seconds_count")
	}
	start := time.Now()
	if notReady {
		c.setReady(old, false)
	} else {
		c.agents[old].Kill()
	}
	moved := c.host("web", func(h string) bool { return anyHost(h) && h != old })
	t.Logf("host %s → %s after %s", old, moved, time.Since(start).Round(time.Millisecond))
	cause := "unreachable"
	if notReady {
		cause = "not_ready"
	}
	c.leaderMetric(1, "ovn_egress_host_changes_total", "cause", cause)
	c.eventually("reroute to "+moved, 15*time.Second, func() bool { return c.reroutesTo(moved) })
	c.expectSource(p1, 15*time.Second, only(lb))
	c.viaHost(p1, moved)
	t.Logf("traffic through %s after %s", moved, time.Since(start).Round(time.Millisecond))
	if !notReady {
		// One failover timed from the dead host's last answered probe to the
		// new host's rows: within the probe settings (1 s + 1 s) and the NB part.
		c.leaderMetric(1, "ovn_egress_failover_seconds_count")
		m, err := c.masterMetrics(c.leaderIndex())
		if err != nil {
			t.Fatal(err)
		}
		// A plausible value, not a speed bound (make bench measures that).
		if sum, _ := m.Get("ovn_egress_failover_seconds_sum"); sum <= 0 || sum > 30 {
			t.Errorf("ovn_egress_failover_seconds_sum = %v, want within (0, 30]", sum)
		} else {
			t.Logf("failover (last good probe → NB rows repointed) %.3fs", sum)
		}
		if backend == "host" {
			// Served traffic and failed over: every series there is.
			c.monitoringReferencesExposed()
		}
	}
}

func (c *cluster) setReady(node string, ready bool) {
	c.t.Helper()
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	// The master patches the Node's labels meanwhile: read, change and
	// write again on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kube.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = status
			}
		}
		_, err = kube.Client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) label(node, key, value string) {
	c.t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
	if _, err := kube.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) patchSelector(name string, labels map[string]string) {
	c.t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodeSelector": map[string]any{"matchLabels": labels}}})
	if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func hostIPs(c *cluster, node string) []netip.Addr {
	var out []netip.Addr
	for _, p := range c.topo.Node(node).HostIPs {
		out = append(out, p.Addr())
	}
	return out
}

func contains(ips []netip.Addr, ip netip.Addr) bool {
	for _, x := range ips {
		if x == ip {
			return true
		}
	}
	return false
}

func familiesName(fs []ipfamily.Family) string {
	s := ""
	for _, f := range fs {
		s += string(f)
	}
	return s
}
