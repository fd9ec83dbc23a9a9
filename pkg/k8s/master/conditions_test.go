package master_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/status"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
)

// condition is the EgressService's condition of type typ, as the API
// server has it ("" status when there is none, or it is of an older
// generation than the object's).
func (c *cluster) condition(name, typ string) metav1.Condition {
	c.t.Helper()
	es, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	cond := meta.FindStatusCondition(es.Status.Conditions, typ)
	if cond == nil || cond.ObservedGeneration != es.Generation {
		return metav1.Condition{}
	}
	return *cond
}

// waitCondition waits until the condition has status and reason.
func (c *cluster) waitCondition(name, typ string, st metav1.ConditionStatus, reason string) metav1.Condition {
	c.t.Helper()
	var got metav1.Condition
	c.eventually(fmt.Sprintf("%s %s=%s (%s)", name, typ, st, reason), func() bool {
		got = c.condition(name, typ)
		return got.Status == st && got.Reason == reason
	})
	return got
}

// announce writes MetalLB's ServiceL2Status for Service name of the
// test's namespace, saying node announces it, as MetalLB's speaker does:
// its status.node is immutable, so a move is a new object and the old one
// goes.
func (c *cluster) announce(name, node string) {
	c.t.Helper()
	ctx := context.Background()
	ri := kube.Dynamic.Resource(status.Layer2Resource).Namespace(testenv.MetalLBNamespace)
	prefix := "l2-" + c.ns + "-" + name + "-"
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
		"metadata": map[string]any{"name": prefix + node, "namespace": testenv.MetalLBNamespace},
	}}
	list, err := ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, o := range list.Items {
		if strings.HasPrefix(o.GetName(), prefix) {
			if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				c.t.Fatal(err)
			}
		}
	}
	cur, err := ri.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	cur.Object["status"] = map[string]any{"node": node, "serviceName": name, "serviceNamespace": c.ns}
	if _, err := ri.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// TestConditions: an EgressService's conditions say, on the object, which
// part of its egress stops it — no eligible node, its host's agent not
// reporting it, MetalLB announcing its IP from another node — each with
// its own reason, and Ready once all is well; each condition at the
// object's generation, written only when it changes. The master runs with
// the chart's RBAC and MetalLB's real CRDs.
func TestConditions(t *testing.T) {
	testenv.InstallMetalLBCRDs(t, kube)
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	es := testenv.EgressService(c.ns, "web", "")
	es.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"conditions-test": c.ns}}
	if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Create(context.Background(), es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := c.config("ovn-egress-master") // the chart's RBAC allows its own Lease only
	cfg.Select = selection.Config{HealthInterval: 0, Prober: allReachable{}}
	m, _ := c.start(cfg, saConfig(t))

	got := c.waitCondition("web", conditions.HostAssigned, metav1.ConditionFalse, string(translate.ReasonNoEligibleNode))
	t.Logf("HostAssigned: %s", got.Message)
	c.waitCondition("web", conditions.Ready, metav1.ConditionFalse, string(translate.ReasonNoEligibleNode))
	c.waitCondition("web", conditions.AgentsReady, metav1.ConditionUnknown, conditions.ReasonNoHost)

	c.label("node2", "conditions-test", c.ns)
	t.Cleanup(func() { c.label("node2", "conditions-test", "") })
	c.waitCondition("web", conditions.HostAssigned, metav1.ConditionTrue, conditions.ReasonHostAssigned)
	got = c.waitCondition("web", conditions.AgentsReady, metav1.ConditionFalse, conditions.ReasonAgentNotReady)
	t.Logf("AgentsReady: %s", got.Message)
	c.waitCondition("web", conditions.Ready, metav1.ConditionFalse, conditions.ReasonAgentNotReady)

	kube.SetReport(t, "node2", translate.Report{c.ns + "/web": kube.ReportFor(t, "node2", c.ns, "web", c.topo.ClusterSubnets)})
	t.Cleanup(func() { kube.DeleteReport(t, "node2") })
	c.waitCondition("web", conditions.AgentsReady, metav1.ConditionTrue, conditions.ReasonAgentsReady)
	c.waitCondition("web", conditions.Announced, metav1.ConditionUnknown, conditions.ReasonNotAnnounced)
	c.waitCondition("web", conditions.Ready, metav1.ConditionTrue, conditions.ReasonReady)

	// A write of conditions alone is nothing translation reads: it
	// translates nothing again.
	c.eventually("translation idle", m.Translation().Idle)
	translated := m.Translation().Stats().Services
	c.announce("web", "node3")
	got = c.waitCondition("web", conditions.Announced, metav1.ConditionFalse, conditions.ReasonAnnouncedElsewhere)
	t.Logf("Announced: %s", got.Message)
	c.eventually("translation idle", m.Translation().Idle)
	if n := m.Translation().Stats().Services - translated; n != 0 {
		t.Errorf("the conditions' write translated %d services again", n)
	}
	c.waitCondition("web", conditions.Ready, metav1.ConditionFalse, conditions.ReasonAnnouncedElsewhere)
	c.announce("web", "node2")
	c.waitCondition("web", conditions.Announced, metav1.ConditionTrue, conditions.ReasonAnnouncedFromHost)
	ready := c.waitCondition("web", conditions.Ready, metav1.ConditionTrue, conditions.ReasonReady)

	// Converged: syncing everything again writes nothing, and Ready kept
	// the time it became True.
	c.eventually("the status controller idle", m.Status().Idle)
	before := m.Status().Stats().Writes
	m.Status().EnqueueAll()
	c.eventually("the status controller idle again", m.Status().Idle)
	if after := m.Status().Stats().Writes; after != before {
		t.Errorf("converged conditions written again: %d writes, then %d", before, after)
	}
	if again := c.condition("web", conditions.Ready); !again.LastTransitionTime.Equal(&ready.LastTransitionTime) {
		t.Errorf("Ready's lastTransitionTime moved from %v to %v without a transition", ready.LastTransitionTime, again.LastTransitionTime)
	}

	// A spec change is a new generation: the conditions follow it.
	cur, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Network = "100"
	if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// (condition reads only a condition at the object's new generation.)
	c.waitCondition("web", conditions.AgentsReady, metav1.ConditionFalse, conditions.ReasonAgentNotReady)
	if h := c.host("web"); h != "node2" {
		t.Errorf("status.host %q after the status controller's writes, want node2 (it never writes the host)", h)
	}
}
