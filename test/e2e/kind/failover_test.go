package kind

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

const (
	labelControlPlane   = "node-role.kubernetes.io/control-plane"
	labelZoneController = "node-role.kubernetes.io/zone-controller"
)

// TestFailoverAgentStopped: the host's node agent goes away, so the host
// stops answering the master's health probe (hack/deploy.sh runs the
// master with --health-check-mode=connect and the agents with
// --health-listen) → the other matching node within the probe interval and
// timeout, and the pods keep leaving with the LB IP through it, with no pod
// address reaching the outside during the move.
//
// The selector makes the host move from the third node to the second. In
// interconnect (the agents translate their own zones) the third node runs
// no backend: its agent is also its zone's translator, so stopping it
// freezes that zone's NB rows, and a backend there would keep being
// rerouted to its own node (README, "Interconnect: the agent is its zone's
// translator"). With one central NB the master rewrites every row, so a
// backend runs on the stopped host too.
func TestFailoverAgentStopped(t *testing.T) {
	e := newEnv(t)
	zoned := e.agentTranslates()
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		a, b, c := e.nodes[0].Name, e.nodes[1].Name, e.nodes[2].Name
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		pods := []*pod{e.backend(svc+"-1", a, app), e.backend(svc+"-2", b, app)}
		if !zoned {
			pods = append(pods, e.backend(svc+"-3", c, app))
		}
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		sel := "failover-" + lower(f)
		e.label(c, selectorKey, sel)
		e.egressService(svc, egressv1.EgressServiceSpec{NodeSelector: selectorOf(sel)})
		e.waitHost(svc, hostTimeout, isHost(c))
		// The node to fail over to; the host is sticky, so c keeps it.
		e.label(b, selectorKey, sel)
		for _, p := range pods {
			e.expectSource(p, f, trafficTimeout, lb)
		}
		if h := e.waitHost(svc, hostTimeout, anyNode); h != c {
			t.Fatalf("host moved from %s to %s when %s started to match", c, h, b)
		}

		e.keepAsking(pods[0], f)
		start := time.Now()
		e.stopAgent(c)
		e.waitHost(svc, hostTimeout, isHost(b))
		t.Logf("host %s → %s %s after its agent was told to stop", c, b, time.Since(start).Round(100*time.Millisecond))
		for _, p := range pods {
			e.expectSource(p, f, trafficTimeout, lb)
		}
	})
}

// TestFailoverNodeNotReady: the host's kubelet stops, the node goes
// NotReady (after the node-monitor grace period) → the host moves to the
// other matching node and the pods leave with the LB IP through it. Workers
// only (the control plane runs the API server, and with one central NB
// that NB); first family of -families only, as it takes minutes. The
// stopped kubelet leaves the node's containers running, so in interconnect
// its agent keeps translating its zone.
func TestFailoverNodeNotReady(t *testing.T) {
	e := newEnv(t)
	f := e.familyList()[0]
	workers := e.workers()
	if len(workers) < 2 {
		t.Fatalf("need 2 workers outside the control plane (and a central NB's zone controller), have %v", workers)
	}
	var client string
	for _, n := range e.nodes {
		if !slices.Contains(workers[:2], n.Name) {
			client = n.Name
			break
		}
	}
	svc := "web-" + lower(f)
	app := map[string]string{"app": svc}
	p := e.backend(svc+"-client", client, app)
	lb := e.loadBalancer(svc, f, app, false)
	e.advertise(svc)
	e.label(workers[0], selectorKey, "notready")
	e.label(workers[1], selectorKey, "notready")
	e.egressService(svc, egressv1.EgressServiceSpec{NodeSelector: selectorOf("notready")})
	old := e.waitHost(svc, hostTimeout, func(h string) bool { return slices.Contains(workers[:2], h) })
	e.expectSource(p, f, trafficTimeout, lb)

	start := time.Now()
	e.onNode(old, "systemctl", "stop", "kubelet")
	t.Cleanup(func() { e.startKubelet(old) })
	moved := e.waitHost(svc, 4*time.Minute, func(h string) bool { return anyNode(h) && h != old })
	t.Logf("host %s → %s %s after its kubelet stopped", old, moved, time.Since(start).Round(time.Second))
	e.expectSource(p, f, trafficTimeout, lb)
}

// workers are the Ready nodes that are neither control plane nor (with
// one central NB, E2E_MODE=central) the zone controller holding it, by
// name.
func (e *env) workers() []string {
	var out []string
	for _, n := range e.nodes {
		_, cp := n.Labels[labelControlPlane]
		_, zc := n.Labels[labelZoneController]
		if !cp && !zc {
			out = append(out, n.Name)
		}
	}
	return out
}

// startKubelet starts node's kubelet again and waits for the node to be Ready.
func (e *env) startKubelet(node string) {
	if _, err := e.oci("exec", node, "systemctl", "start", "kubelet"); err != nil {
		e.t.Errorf("start kubelet on %s: %v", node, err)
		return
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && nodeReady(n) {
			return
		}
		time.Sleep(2 * time.Second)
	}
	e.t.Errorf("node %s not Ready 3 minutes after its kubelet started", node)
}
