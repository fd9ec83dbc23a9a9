package kind

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// Timeouts of the scenarios: the master picks a host within seconds; the
// first packets through a new host also wait for MetalLB's announcement
// and for the node agent's readiness report.
const (
	hostTimeout    = time.Minute
	trafficTimeout = time.Minute
)

// TestNoSelector: with no node selector, backend pods on every node leave
// with the Service's load-balancer IP through one host; a pod not behind
// the Service keeps its node's address; the outside reaches the Service
// through the LB IP; pod → pod and pod → node traffic is not rerouted;
// deleting the EgressService gives every pod its node's address back.
func TestNoSelector(t *testing.T) {
	e := newEnv(t)
	e.hostEcho("host-echo", e.nodes[1].Name)
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		var pods []*pod
		for i, n := range e.nodes[:3] {
			pods = append(pods, e.backend(fmt.Sprintf("%s-%d", svc, i), n.Name, app))
		}
		other := e.backend(svc+"-other", e.nodes[2].Name, nil)
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		e.expectNodeSource(pods[0], f, trafficTimeout)

		e.egressService(svc, egressv1.EgressServiceSpec{})
		host := e.waitHost(svc, hostTimeout, anyNode)
		t.Logf("host of %s: %s", svc, host)
		for _, p := range pods {
			e.expectSource(p, f, trafficTimeout, lb)
		}
		e.expectNodeSource(other, f, trafficTimeout)
		e.expectExternalReaches(lb)

		// Not rerouted: pod → pod on another node keeps the pod's own
		// address; pod → another node's address leaves through the pod's
		// own node, with that node's address.
		e.expectSourceTo(pods[0], hostPort(other.ips[f], echoPort), trafficTimeout, pods[0].ips[f])
		e.expectSourceTo(pods[0], hostPort(e.nodeIP(e.nodes[1].Name, f), hostEchoPort), trafficTimeout, e.nodeIP(pods[0].node, f))

		e.deleteEgressService(svc)
		e.waitLabelGone(svc)
		for _, p := range pods {
			e.expectNodeSource(p, f, trafficTimeout)
		}
	})
}

// TestSelectorMovesHost: the selector picks the host; changing it moves
// the host and the traffic; a selector matching no node leaves
// status.host empty and the pods use their nodes' addresses; labelling a
// node to match brings the LB IP back.
func TestSelectorMovesHost(t *testing.T) {
	e := newEnv(t)
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		a, b, c := e.nodes[0].Name, e.nodes[1].Name, e.nodes[2].Name
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p1, p3 := e.backend(svc+"-1", a, app), e.backend(svc+"-3", c, app)
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		e.label(b, selectorKey, "a")
		e.label(c, selectorKey, "b")

		e.egressService(svc, egressv1.EgressServiceSpec{NodeSelector: selectorOf("a")})
		e.waitHost(svc, hostTimeout, isHost(b))
		e.expectSource(p1, f, trafficTimeout, lb)
		e.expectSource(p3, f, trafficTimeout, lb)

		e.updateEgressService(svc, func(s *egressv1.EgressServiceSpec) { s.NodeSelector = selectorOf("b") })
		e.waitHost(svc, hostTimeout, isHost(c))
		e.expectSource(p1, f, trafficTimeout, lb)
		e.expectSource(p3, f, trafficTimeout, lb)

		e.updateEgressService(svc, func(s *egressv1.EgressServiceSpec) { s.NodeSelector = selectorOf("nowhere") })
		e.waitHost(svc, hostTimeout, isHost(""))
		e.expectNodeSource(p1, f, trafficTimeout)
		e.expectNodeSource(p3, f, trafficTimeout)

		e.label(a, selectorKey, "nowhere")
		e.waitHost(svc, hostTimeout, isHost(a))
		e.expectSource(p1, f, trafficTimeout, lb)
		e.expectSource(p3, f, trafficTimeout, lb)
	})
}

// waitLabelGone waits until no node carries the egress-service label of svc.
func (e *env) waitLabelGone(svc string) {
	e.t.Helper()
	label := hosts.NodeLabel(e.ns, svc)
	e.eventually("label "+label+" gone from every node", hostTimeout, func() (bool, string) {
		nodes, err := e.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: label})
		if err != nil {
			return false, err.Error()
		}
		return len(nodes.Items) == 0, fmt.Sprintf("%d nodes labelled", len(nodes.Items))
	})
}
