package selection_test

import (
	"context"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestSelectLabelAndMove is ovn-kubernetes' cluster-manager "services" and
// "node labels" cases (§4.2 3, 4) against a real API server: a service goes
// to the node its selector matches, a second one to the emptier node, a
// selector change moves the host and the label, Network becomes ALL, and
// deleting an EgressService removes its label. Status and labels are read
// back from the API server, Events listed.
func TestSelectLabelAndMove(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(selection.Config{}, kube.Config)
	e.create("web", []string{"172.18.0.100"}, []string{"10.244.1.5@node1"}, onNode("node2"))
	e.waitHost("web", "node2")
	e.waitLabels(map[string][]string{"node2": {e.label("web")}})
	e.waitEvent("web", hosts.ReasonHostAssigned, "host is node2")

	// A second service: node1 and node3 are empty, node1 comes first.
	e.create("api", []string{"172.18.0.101"}, []string{"10.244.3.5@node3"})
	e.waitHost("api", "node1")
	e.waitLabels(map[string][]string{"node1": {e.label("api")}, "node2": {e.label("web")}})

	// The selector moves web to node3.
	e.updateSpec("web", onNode("node3"))
	e.waitHost("web", "node3")
	e.waitLabels(map[string][]string{"node1": {e.label("api")}, "node3": {e.label("web")}})
	e.waitEvent("web", hosts.ReasonHostChanged, "from node2 to node3: node node2 does not match spec.nodeSelector")

	// Network: ALL, and no label.
	e.updateSpec("api", func(es *egressv1.EgressService) { es.Spec.SourceIPBy = egressv1.Network })
	e.waitHost("api", egressv1.HostAll)
	e.waitLabels(map[string][]string{"node3": {e.label("web")}})

	// Deleting the EgressService removes its label.
	if err := kube.Egress.K8sV1().EgressServices(e.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitLabels(map[string][]string{})
	e.settle(c)
	if st := c.Stats(); st.Errors != 0 {
		t.Errorf("errors: %+v", st)
	}
}

// TestProblemsBecomeEvents: each reason a Service cannot be served is one
// Warning Event, recorded once however often the service is synced; an
// invalid selector never gets a host (checked for a while, as upstream's
// Consistently); with --unassigned-traffic=drop the Event says so.
func TestProblemsBecomeEvents(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(selection.Config{UnassignedTraffic: translate.UnassignedDrop}, kube.Config)

	e.create("badsel", []string{"172.18.0.100"}, []string{"10.244.1.5@node1"}, withSelector(map[string]string{"a:b": "c&"}))
	ev := e.waitEvent("badsel", translate.ReasonInvalidNodeSelector, "nodeSelector is invalid")
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("InvalidNodeSelector is %s; want Warning", ev.Type)
	}
	e.waitEvent("badsel", translate.ReasonInvalidNodeSelector, "--unassigned-traffic=drop")

	e.create("noingress", nil, []string{"10.244.1.6@node1"})
	e.waitEvent("noingress", translate.ReasonNoIngressIP, "no load-balancer ingress IP")

	e.create("twoips", []string{"172.18.0.101", "172.18.0.102"}, []string{"10.244.1.7@node1"})
	e.waitEvent("twoips", translate.ReasonMultipleIngressIPs, "the first, 172.18.0.101, is used")

	e.create("noeps", []string{"172.18.0.103"}, nil)
	e.waitEvent("noeps", translate.ReasonNoEndpoints, "no cluster-networked endpoints")

	e.create("nomatch", []string{"172.18.0.104"}, []string{"10.244.1.8@node1"}, withSelector(map[string]string{"egress": "yes"}))
	e.waitEvent("nomatch", translate.ReasonNoEligibleNode, "of 3 nodes, 3 not matching spec.nodeSelector")

	e.createES("nosvc")
	e.waitEvent("nosvc", translate.ReasonServiceNotFound, "not found")

	kube.CreateLoadBalancer(t, e.ns, "cip", []string{"172.18.0.105"}, "10.244.1.9@node1")
	svc, err := kube.Client.CoreV1().Services(e.ns).Get(context.Background(), "cip", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	if _, err := kube.Client.CoreV1().Services(e.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createES("cip")
	e.waitEvent("cip", translate.ReasonServiceNotLoadBalancer, "not LoadBalancer")

	e.waitHost("twoips", "node1")
	e.settle(c)
	for _, name := range []string{"badsel", "noingress", "noeps", "nomatch", "nosvc", "cip"} {
		if h := e.host(name); h != "" {
			t.Errorf("%s: host %q; want none", name, h)
		}
	}
	// Resync everything several times: no Event is repeated.
	for i := 0; i < 3; i++ {
		for _, name := range []string{"badsel", "noingress", "twoips"} {
			e.updateSpec(name, func(es *egressv1.EgressService) {
				if es.Annotations == nil {
					es.Annotations = map[string]string{}
				}
				es.Annotations["touch"] = string(rune('a' + i))
			})
		}
		e.settle(c)
	}
	for name, r := range map[string]translate.Reason{"badsel": translate.ReasonInvalidNodeSelector,
		"noingress": translate.ReasonNoIngressIP, "twoips": translate.ReasonMultipleIngressIPs} {
		if n := e.countEvents(name, r); n != 1 {
			t.Errorf("%s: %d %s events; want 1", name, n, r)
		}
	}
	if h := e.host("badsel"); h != "" {
		t.Errorf("invalid selector got host %q", h)
	}
	if got := e.nodeLabels(); len(got) != 1 || len(got["node1"]) != 1 {
		t.Errorf("labels: %v; want only twoips' on node1", got)
	}

	// Fixing the selector assigns a host.
	e.updateSpec("badsel", func(es *egressv1.EgressService) { es.Spec.NodeSelector = metav1.LabelSelector{} })
	e.waitHost("badsel", "node2")
}

// TestUnreachableHostDrained is upstream's reachability case (§4.2 8) with
// a fake prober: the host stops answering → its service moves (label too)
// and HostUnreachable and HostChanged are recorded; it answers again → no
// failback; every node down → no host; one back → assigned again.
func TestUnreachableHostDrained(t *testing.T) {
	e := newEnv(t)
	p := newFakeProber()
	c, _ := e.start(selection.Config{HealthInterval: 50 * time.Millisecond, HealthTimeout: 50 * time.Millisecond, Prober: p}, kube.Config)
	e.create("web", []string{"172.18.0.100"}, []string{"10.244.1.5@node1"})
	e.waitHost("web", "node1")
	e.eventually("node1 probed", func() bool { return p.probes("node1") > 0 })
	if p.probes("node2") != 0 {
		t.Errorf("node2 hosts nothing but was probed")
	}

	p.set("node1", true)
	e.waitHost("web", "node2")
	e.waitLabels(map[string][]string{"node2": {e.label("web")}})
	e.waitEvent("web", hosts.ReasonHostUnreachable, "node1 does not answer health checks")
	e.waitEvent("web", hosts.ReasonHostChanged, "from node1 to node2: node node1 is unreachable")

	// node1 answers again: it is probed until then, and nothing moves back.
	before := p.probes("node1")
	e.eventually("node1 still probed while unreachable", func() bool { return p.probes("node1") > before+2 })
	p.set("node1", false)
	rounds := c.HealthRounds()
	e.eventually("a few more rounds", func() bool { return c.HealthRounds() > rounds+3 })
	e.settle(c)
	if h := e.host("web"); h != "node2" {
		t.Fatalf("failed back to %s", h)
	}

	for _, n := range []string{"node1", "node2", "node3"} {
		p.set(n, true)
	}
	// web may pass through nodes not known to be down yet (only hosts and
	// unreachable nodes are probed) before it ends without a host.
	e.waitHost("web", "")
	e.waitEvent("web", translate.ReasonNoEligibleNode, "3 unreachable")
	e.waitLabels(map[string][]string{})
	e.settle(c)
	if n := e.countEvents("web", translate.ReasonNoEligibleNode); n != 1 {
		t.Errorf("%d NoEligibleNode events; want 1 (HostUnreachable going away is no new situation)", n)
	}
	p.set("node3", false)
	e.waitHost("web", "node3")
	e.waitLabels(map[string][]string{"node3": {e.label("web")}})
}

// TestFlappingNodeHeldDown: the damping rule with a real API server. web's
// host node1 fails and web moves to node2; node1 answers again and is held
// down; node2 fails: web goes to the steady node3, not back to node1 —
// until node3 fails too, when the held-down node1 is the last resort.
func TestFlappingNodeHeldDown(t *testing.T) {
	e := newEnv(t)
	p := newFakeProber()
	e.start(selection.Config{HealthInterval: 50 * time.Millisecond, HealthTimeout: 50 * time.Millisecond, HealthHoldDown: time.Hour, Prober: p}, kube.Config)
	e.create("web", []string{"172.18.0.100"}, []string{"10.244.1.5@node1"})
	e.waitHost("web", "node1")
	p.set("node1", true)
	e.waitHost("web", "node2")
	p.set("node1", false)
	e.eventually("node1 probed again (answers)", func() bool {
		before := p.probes("node1")
		time.Sleep(150 * time.Millisecond)
		return p.probes("node1") == before
	})
	p.set("node2", true)
	e.waitHost("web", "node3")
	e.waitLabels(map[string][]string{"node3": {e.label("web")}})
	p.set("node3", true)
	e.waitHost("web", "node1")
}
