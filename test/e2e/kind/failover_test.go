package kind

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
)

const (
	labelControlPlane   = "node-role.kubernetes.io/control-plane"
	labelZoneController = "node-role.kubernetes.io/zone-controller"
)

// TestFailoverAgentStopped: the host's node agent goes away, so the host
// stops answering the master's health probe (hack/deploy.sh runs the
// master with --health-check-mode=connect and the agents with
// --health-listen) → another host within the probe interval and timeout,
// and the pods keep leaving with the LB IP through it, with no pod address
// reaching the outside during the move.
func TestFailoverAgentStopped(t *testing.T) {
	e := newEnv(t)
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p1, p2 := e.backend(svc+"-1", e.nodes[0].Name, app), e.backend(svc+"-2", e.nodes[1].Name, app)
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		e.egressService(svc, egressv1.EgressServiceSpec{})
		old := e.waitHost(svc, hostTimeout, anyNode)
		e.expectSource(p1, f, trafficTimeout, lb)

		asker := p1
		if p1.node == old {
			asker = p2
		}
		e.keepAsking(asker, f)
		start := time.Now()
		e.stopAgent(old)
		moved := e.waitHost(svc, hostTimeout, func(h string) bool { return anyNode(h) && h != old })
		t.Logf("host %s → %s %s after its agent was told to stop", old, moved, time.Since(start).Round(100*time.Millisecond))
		e.expectSource(p1, f, trafficTimeout, lb)
		e.expectSource(p2, f, trafficTimeout, lb)
	})
}

// TestFailoverNodeNotReady: the host's kubelet stops, the node goes
// NotReady (after the node-monitor grace period) → the host moves to the
// other matching node and the pods leave with the LB IP through it. Workers
// only (the control plane runs the API server and the NB the master
// writes); first family of -families only, as it takes minutes.
func TestFailoverNodeNotReady(t *testing.T) {
	e := newEnv(t)
	f := e.familyList()[0]
	workers := e.workers()
	if len(workers) < 2 {
		t.Fatalf("need 2 workers outside the control plane and the NB's zone controller, have %v", workers)
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

// workers are the Ready nodes that are neither control plane nor the
// zone controller holding the NB, by name.
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
