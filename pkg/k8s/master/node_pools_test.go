package master_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

// TestTenantNodePools (issue 39.6): with dist/node-pools.yaml (the chart's
// nodePools) a tenant's EgressService must select within its namespace's
// node pool (the ConfigMap ovn-egress/ovn-egress-node-pools; "_all" for
// namespaces without a key, "*" for any node): its spec.nodeSelector's
// matchLabels must hold the pool's labels, so the host is a pool node
// whatever else the selector says. A namespace without a pool chooses no
// host; sourceIPBy Network (no host) is never refused; an update that keeps
// the selector is allowed after the pool changed, a new selector outside it
// is not.
func TestTenantNodePools(t *testing.T) {
	ctx := context.Background()
	installTenantPolicy(t, "../../../dist/node-pools.yaml", "ovn-egress-egressservice-node-pools", "ovn-egress-node-pools",
		func(ns string) bool { return createAccepted(testenv.EgressService(ns, "probe", "")) })
	nsA, nsB, nsC := kube.Namespace(t), kube.Namespace(t), kube.Namespace(t)
	for _, ns := range []string{nsA, nsB, nsC} {
		t.Cleanup(func() {
			_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		})
	}
	a, b, c := tenant(t, nsA), tenant(t, nsB), tenant(t, nsC)
	seq := 0
	newES := func(ns string, sel metav1.LabelSelector) *egressv1.EgressService {
		seq++
		es := testenv.EgressService(ns, fmt.Sprintf("es%d", seq), "")
		es.Spec.NodeSelector = sel
		return es
	}
	labels := func(kv ...string) metav1.LabelSelector {
		m := map[string]string{}
		for _, s := range kv {
			k, v, _ := strings.Cut(s, "=")
			m[k] = v
		}
		return metav1.LabelSelector{MatchLabels: m}
	}
	const refusal = "ValidatingAdmissionPolicy 'ovn-egress-egressservice-node-pools'"
	waitFor := func(cs versioned.Interface, ns string, sel metav1.LabelSelector, want string) {
		t.Helper()
		admissionOutcome(t, cs, func() (*egressv1.EgressService, error) {
			return cs.K8sV1().EgressServices(ns).Create(ctx, newES(ns, sel), metav1.CreateOptions{})
		}, refusal, want)
	}

	// The chart's empty pools: no host anywhere, Network always.
	waitFor(a, nsA, labels(), "namespace "+nsA+" has no node pool (ConfigMap ovn-egress/ovn-egress-node-pools)")
	network := testenv.EgressService(nsA, "network", egressv1.HostAll)
	network.Status, network.Spec.Network = egressv1.EgressServiceStatus{}, "100"
	if _, err := a.K8sV1().EgressServices(nsA).Create(ctx, network, metav1.CreateOptions{}); err != nil {
		t.Errorf("a sourceIPBy Network EgressService refused: %v", err)
	}

	cm, err := kube.Client.CoreV1().ConfigMaps("ovn-egress").Get(ctx, "ovn-egress-node-pools", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const pool = "node-restriction.kubernetes.io/egress"
	cm.Data = map[string]string{nsA: pool + "=team-a", "_all": pool + "=shared, zone=z1", nsC: "*"}
	if cm, err = kube.Client.CoreV1().ConfigMaps("ovn-egress").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(a, nsA, labels(pool+"=team-a"), "")
	mustHoldA := "spec.nodeSelector.matchLabels must hold " + pool + "=team-a, the node pool of namespace " + nsA
	mustHoldB := "spec.nodeSelector.matchLabels must hold " + pool + "=shared, zone=z1, the node pool of namespace " + nsB
	for _, tc := range []struct {
		name string
		cs   versioned.Interface
		ns   string
		sel  metav1.LabelSelector
		want string
	}{
		{"the pool's label", a, nsA, labels(pool + "=team-a"), ""},
		{"the pool and more", a, nsA, labels(pool+"=team-a", "kubernetes.io/hostname=node1"), ""},
		{"any node", a, nsA, labels(), mustHoldA},
		{"another pool", a, nsA, labels(pool + "=shared"), mustHoldA},
		{"the pool's key, another value", a, nsA, labels(pool + "=team-a-x"), mustHoldA},
		{"the pool as an expression only", a, nsA, metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: pool, Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "shared"}}}}, mustHoldA},
		{"_all's pool", b, nsB, labels(pool+"=shared", "zone=z1"), ""},
		{"half of _all's pool", b, nsB, labels(pool + "=shared"), mustHoldB},
		{"another namespace's pool", b, nsB, labels(pool + "=team-a"), mustHoldB},
		{"* any node", c, nsC, labels(), ""},
	} {
		_, err := tc.cs.K8sV1().EgressServices(tc.ns).Create(ctx, newES(tc.ns, tc.sel), metav1.CreateOptions{})
		if tc.want == "" && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), refusal) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v; want refused: %s", tc.name, err, tc.want)
		}
	}

	// The pool changes: an existing EgressService keeps its selector
	// through updates, but cannot switch to one outside the new pool.
	kept, err := a.K8sV1().EgressServices(nsA).Create(ctx, newES(nsA, labels(pool+"=team-a")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[nsA] = pool + "=team-a2"
	if _, err := kube.Client.CoreV1().ConfigMaps("ovn-egress").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(a, nsA, labels(pool+"=team-a"), "must hold "+pool+"=team-a2")
	kept.Labels = map[string]string{"touched": "yes"}
	if kept, err = a.K8sV1().EgressServices(nsA).Update(ctx, kept, metav1.UpdateOptions{}); err != nil {
		t.Errorf("an update keeping the selector (no longer the pool) refused: %v", err)
	} else {
		kept.Spec.NodeSelector = labels(pool+"=team-a", "zone=z2")
		if _, err := a.K8sV1().EgressServices(nsA).Update(ctx, kept, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Errorf("a switch to a selector outside the pool: %v, want refused by the policy", err)
		}
	}
}
