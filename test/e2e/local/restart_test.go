package local

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestRestarts: killing the active master (the standby takes the Lease),
// the NB ovsdb-server, or the host's node agent loses no connectivity once
// they are back, and a master that takes over with nothing changed writes
// nothing to NB.
func TestRestarts(t *testing.T) {
	c := newCluster(t, options{masters: 2})
	p1, p3 := c.addPod("p1", "node1", 5), c.addPod("p3", "node3", 5)
	lb := c.service("web", 0, p1, p3)
	c.egressService("web", egressv1.EgressServiceSpec{})
	host := c.host("web", anyHost)
	c.expectSource(p1, 15*time.Second, only(lb))
	stop := c.keepAsking(p3)
	defer stop()

	// The active master dies; the standby takes over without writing.
	leader := c.leaderIndex()
	standby := 1 - leader
	c.masters[leader].Kill()
	c.eventually("standby leads", 20*time.Second, func() bool {
		return strings.Contains(c.masters[standby].Log(200), "became leader")
	})
	// Converged: its translation controller has synced and has nothing
	// left to do (its own metrics say so), not merely started.
	c.eventually("standby converged", 30*time.Second, func() bool {
		m, err := c.masterMetrics(standby)
		if err != nil {
			return false
		}
		syncs, _ := m.Get("ovn_egress_controller_sync_duration_seconds_count", "controller", "translation")
		depth, present := m.Get("ovn_egress_controller_queue_depth", "controller", "translation")
		return syncs >= 1 && present && depth == 0
	})
	if log := c.masters[standby].Log(500); strings.Contains(log, "nb rows converged") {
		t.Errorf("the new leader wrote to NB with nothing changed:\n%s", log)
	}
	if h := c.host("web", anyHost); h != host {
		t.Errorf("host flapped from %s to %s on takeover; the new leader's log:\n%s", host, h, c.masters[standby].Log(80))
	}
	c.expectSource(p1, 10*time.Second, only(lb))

	// NB goes away and comes back; the dataplane keeps forwarding, and the
	// master converges on what changed meanwhile.
	c.ovn.KillNB()
	c.expectSource(p1, 5*time.Second, only(lb))
	p2 := c.addPodNoNB("p2", "node2", 5)
	if err := c.ovn.StartNB(); err != nil {
		t.Fatal(err)
	}
	c.ovn.AddPod(t, "node2", "p2", p2.ips...)
	kube.SetEndpoints(t, c.ns, "web", endpointsOf(p1, p2, p3)...)
	c.expectSource(p2, 30*time.Second, only(lb))

	// The host's agent restarts: its state stays in the kernel, traffic keeps flowing.
	c.agents[host].Kill()
	c.startAgent(host)
	c.expectSource(p1, 15*time.Second, only(lb))
	c.expectSource(p3, 15*time.Second, only(lb))
	// And once it runs again, its first sync keeps what it finds.
	c.agentReady(host, 30*time.Second)
	// Its listener is on the node's IP alone (the chart's --metrics-ip):
	// not on the host's other addresses.
	if code, _, err := testenv.HTTPGetIn(context.Background(), c.dp.Hosts[host], fmt.Sprintf("http://127.0.0.1:%d/readyz", nodeMetricsPort)); err == nil {
		t.Errorf("the agent's listener answers on the host's loopback (%d): it binds every address", code)
	}
	c.expectSource(p1, 10*time.Second, only(lb))
	c.expectSource(p3, 10*time.Second, only(lb))
}

// leaderIndex reads the Lease to find which master replica leads.
func (c *cluster) leaderIndex() int {
	c.t.Helper()
	var idx int
	c.eventually("a lease holder", 20*time.Second, func() bool {
		l, err := kube.Client.CoordinationV1().Leases("ovn-egress").Get(context.Background(), "ovn-egress-master", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		for i := range c.masters {
			if *l.Spec.HolderIdentity == masterIdentity(i) {
				idx = i
				return true
			}
		}
		return false
	})
	return idx
}

func endpointsOf(pods ...*pod) []string {
	var out []string
	for _, p := range pods {
		for _, ip := range p.ips {
			out = append(out, ip.String()+"@"+p.node)
		}
	}
	return out
}
