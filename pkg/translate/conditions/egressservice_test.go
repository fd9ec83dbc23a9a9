package conditions_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"github.com/ovn-egress/ovn-egress/pkg/translate/translatetest"
)

const key = "ns/web"

// world is one LoadBalancer EgressService on node2 with an endpoint on
// node1, and the input its conditions are computed from, the host's
// report made by the real node plan of node2.
func world(host string, mutate ...func(*egressv1.EgressService)) (*translatetest.World, conditions.EgressServiceInput) {
	w := translatetest.NewWorld(3)
	es := w.ES(key, host, mutate...)
	es.Generation = 4
	w.Svc(key, "172.18.0.100")
	w.EPs(key, "10.244.1.5@node1", "10.244.3.7@node3")
	in := conditions.EgressServiceInput{EgressService: es, Service: w.In.Services[key], EndpointSlices: w.In.EndpointSlices[key],
		ClusterSubnets: w.In.Config.ClusterSubnets, Reports: map[string]translate.Report{}}
	return w, in
}

// agentReport is what the node plan of node reports for the world's
// objects, as a node agent publishes it.
func agentReport(t *testing.T, w *translatetest.World, node string) translate.Report {
	t.Helper()
	out := nodeplan.NodePlan(nodeplan.NodePlanInput{Node: node, EgressServices: w.In.EgressServices, Services: []*corev1.Service{w.In.Services[key]},
		EndpointSlices: w.In.EndpointSlices[key], ClusterSubnets: w.In.Config.ClusterSubnets, Tables: map[string]uint32{}})
	if len(out.Problems) > 0 {
		t.Fatalf("node plan of %s: %v", node, out.Problems)
	}
	return out.Report()
}

func byType(cs []metav1.Condition) map[string]metav1.Condition {
	out := map[string]metav1.Condition{}
	for _, c := range cs {
		out[c.Type] = c
	}
	return out
}

// want checks a condition's status, reason and that its message says what.
func want(t *testing.T, cs []metav1.Condition, typ string, status metav1.ConditionStatus, reason, says string) {
	t.Helper()
	c, ok := byType(cs)[typ]
	switch {
	case !ok:
		t.Errorf("no %s condition in %v", typ, cs)
	case c.Status != status || c.Reason != reason || !strings.Contains(c.Message, says):
		t.Errorf("%s = %s/%s %q, want %s/%s saying %q", typ, c.Status, c.Reason, c.Message, status, reason, says)
	case c.ObservedGeneration != 4:
		t.Errorf("%s observedGeneration = %d, want the object's 4", typ, c.ObservedGeneration)
	}
}

// TestEgressServiceReady: a host, its agent's report of the real node plan,
// MetalLB announcing from the host: every condition True.
func TestEgressServiceReady(t *testing.T) {
	w, in := world("node2")
	in.Reports["node2"] = agentReport(t, w, "node2")
	in.Layer2, in.Announcers = true, []string{"node2"}
	cs := conditions.EgressService(in)
	if len(cs) != 4 || cs[0].Type != conditions.Ready {
		t.Fatalf("conditions %v: want Ready first of four", cs)
	}
	want(t, cs, conditions.Ready, metav1.ConditionTrue, conditions.ReasonReady, "leaves as asked")
	want(t, cs, conditions.HostAssigned, metav1.ConditionTrue, conditions.ReasonHostAssigned, "node2")
	want(t, cs, conditions.AgentsReady, metav1.ConditionTrue, conditions.ReasonAgentsReady, "node2")
	want(t, cs, conditions.Announced, metav1.ConditionTrue, conditions.ReasonAnnouncedFromHost, "node2")

	// Without a layer-2 status (BGP, another load balancer) nothing says
	// the announcement is wrong: still Ready.
	in.Layer2, in.Announcers = false, nil
	cs = conditions.EgressService(in)
	want(t, cs, conditions.Ready, metav1.ConditionTrue, conditions.ReasonReady, "")
	want(t, cs, conditions.Announced, metav1.ConditionUnknown, conditions.ReasonAnnouncerUnknown, "not known")
}

// TestEgressServiceNotReady: each failure has its own reason, on the
// condition concerned and on Ready.
func TestEgressServiceNotReady(t *testing.T) {
	t.Run("no eligible node", func(t *testing.T) {
		_, in := world("")
		in.HostProblems.Add(key, translate.ReasonNoEligibleNode, "no node matches the nodeSelector")
		cs := conditions.EgressService(in)
		want(t, cs, conditions.HostAssigned, metav1.ConditionFalse, string(translate.ReasonNoEligibleNode), "matches the nodeSelector")
		want(t, cs, conditions.Ready, metav1.ConditionFalse, string(translate.ReasonNoEligibleNode), "HostAssigned: no node matches")
		want(t, cs, conditions.AgentsReady, metav1.ConditionUnknown, conditions.ReasonNoHost, "")
	})
	t.Run("no report", func(t *testing.T) {
		_, in := world("node2")
		cs := conditions.EgressService(in)
		want(t, cs, conditions.AgentsReady, metav1.ConditionFalse, conditions.ReasonAgentNotReady, "on node2 has not reported")
		want(t, cs, conditions.Ready, metav1.ConditionFalse, conditions.ReasonAgentNotReady, "AgentsReady: ")
	})
	t.Run("report behind the endpoints", func(t *testing.T) {
		w, in := world("node2")
		in.Reports["node2"] = agentReport(t, w, "node2")
		w.EPs(key, "10.244.1.5@node1", "10.244.3.7@node3", "10.244.3.8@node3")
		in.EndpointSlices = w.In.EndpointSlices[key]
		want(t, conditions.EgressService(in), conditions.AgentsReady, metav1.ConditionFalse, conditions.ReasonAgentNotReady, "not caught up")
	})
	t.Run("report of another network", func(t *testing.T) {
		w, in := world("node2")
		in.Reports["node2"] = agentReport(t, w, "node2")
		in.EgressService.Spec.Network = "100"
		want(t, conditions.EgressService(in), conditions.AgentsReady, metav1.ConditionFalse, conditions.ReasonAgentNotReady, "not caught up")
	})
	t.Run("announced from another node", func(t *testing.T) {
		w, in := world("node2")
		in.Reports["node2"] = agentReport(t, w, "node2")
		in.Layer2, in.Announcers = true, []string{"node3"}
		cs := conditions.EgressService(in)
		want(t, cs, conditions.Announced, metav1.ConditionFalse, conditions.ReasonAnnouncedElsewhere, "from node3, not from the host node2")
		want(t, cs, conditions.Ready, metav1.ConditionFalse, conditions.ReasonAnnouncedElsewhere, "egress-service.k8s.ovn.org/ns-web")
	})
}

// TestEgressServiceNetwork: sourceIPBy Network is carried by every node
// with an endpoint; each one's agent must report it, and no announcement
// is needed.
func TestEgressServiceNetwork(t *testing.T) {
	w, in := world(egressv1.HostAll, func(e *egressv1.EgressService) { e.Spec.Network = "100" })
	if got := conditions.CarryingNodes(in.EgressService, in.Service, in.EndpointSlices, in.ClusterSubnets); strings.Join(got, ",") != "node1,node3" {
		t.Fatalf("carrying nodes %v, want node1,node3", got)
	}
	in.Reports["node1"] = agentReport(t, w, "node1")
	cs := conditions.EgressService(in)
	want(t, cs, conditions.HostAssigned, metav1.ConditionTrue, conditions.ReasonAllNodes, "each node")
	want(t, cs, conditions.AgentsReady, metav1.ConditionFalse, conditions.ReasonAgentNotReady, "on node3 has not reported")
	want(t, cs, conditions.Announced, metav1.ConditionTrue, conditions.ReasonNotRequired, "")
	in.Reports["node3"] = agentReport(t, w, "node3")
	cs = conditions.EgressService(in)
	want(t, cs, conditions.AgentsReady, metav1.ConditionTrue, conditions.ReasonAgentsReady, "node1, node3")
	want(t, cs, conditions.Ready, metav1.ConditionTrue, conditions.ReasonReady, "")
}

// TestSetKeepsTransitionTimes: a condition's lastTransitionTime moves only
// when its status does; a condition of a type ovn-egress does not compute
// stays; an unchanged set is no change.
func TestSetKeepsTransitionTimes(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	foreign := metav1.Condition{Type: "Mine", Status: metav1.ConditionTrue, Reason: "X", LastTransitionTime: t0}
	conds := []metav1.Condition{foreign}
	_, in := world("node2")
	if !conditions.Set(&conds, conditions.EgressService(in), t0) {
		t.Fatal("first Set: no change")
	}
	if conditions.Set(&conds, conditions.EgressService(in), t1) {
		t.Error("the same conditions again: a change")
	}
	w, in := world("node2")
	in.Reports["node2"] = agentReport(t, w, "node2")
	if !conditions.Set(&conds, conditions.EgressService(in), t1) {
		t.Fatal("the agent reported: no change")
	}
	got := byType(conds)
	if got[conditions.AgentsReady].LastTransitionTime != t1 || got[conditions.HostAssigned].LastTransitionTime != t0 {
		t.Errorf("transition times AgentsReady %v (want %v), HostAssigned %v (want %v)", got[conditions.AgentsReady].LastTransitionTime, t1, got[conditions.HostAssigned].LastTransitionTime, t0)
	}
	if got["Mine"] != foreign {
		t.Errorf("foreign condition %v, want %v", got["Mine"], foreign)
	}
}

// TestEgressServiceStandingBack: while ovn-kubernetes' own feature is
// active, Ready says ovn-egress stands back, whatever else holds.
func TestEgressServiceStandingBack(t *testing.T) {
	w, in := world("node2")
	in.Reports["node2"] = agentReport(t, w, "node2")
	in.Standoff = "ovn-kubernetes' egress-service rows are in NB"
	cs := conditions.EgressService(in)
	want(t, cs, conditions.Ready, metav1.ConditionFalse, conditions.ReasonStandingBack, "egress-service rows are in NB")
	want(t, cs, conditions.AgentsReady, metav1.ConditionTrue, conditions.ReasonAgentsReady, "")
}
