package master_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// TestMasterChangesOnlyHostLabels: with dist/master's admission policy, the
// master's ServiceAccount (which RBAC lets patch every Node) may add and
// remove the egress-service.k8s.ovn.org/ host labels and nothing else on a
// Node: not another label, not ovn-kubernetes' annotations, not taints or
// unschedulable, not status.
func TestMasterChangesOnlyHostLabels(t *testing.T) {
	ctx := context.Background()
	if err := kube.Apply(ctx, "../../../dist/namespace.yaml", "../../../dist/master/rbac.yaml", "../../../dist/master/admission.yaml"); err != nil {
		t.Fatal(err)
	}
	const node = "vap-master"
	_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels:      map[string]string{"egress": "pool-a"},
		Annotations: map[string]string{"k8s.ovn.org/node-subnets": `{"default":["10.244.1.0/24"]}`}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	cfg, err := kube.ServiceAccountConfig(ctx, "ovn-egress", "ovn-egress-master")
	if err != nil {
		t.Fatal(err)
	}
	master, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string, sub ...string) error {
		_, err := master.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
		return err
	}
	const by = "ValidatingAdmissionPolicy 'ovn-egress-master'"
	// Until the policy is loaded the change goes through: the admin undoes
	// it, so that every try is a change again (not a no-op update that any
	// policy admits).
	waitRefusedBy(t, by, "the master changing a Node's other label", func() error {
		err := patch(`{"metadata":{"labels":{"egress":"pool-b"}}}`)
		if err == nil {
			_, _ = kube.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"metadata":{"labels":{"egress":"pool-a"}}}`), metav1.PatchOptions{})
		}
		return err
	})
	if err := patch(`{"metadata":{"labels":{"egress-service.k8s.ovn.org/shop-web":""}}}`); err != nil {
		t.Errorf("the master cannot label its host: %v", err)
	}
	for _, c := range []struct {
		what, body string
		sub        []string
		by         string
	}{
		{"another label", `{"metadata":{"labels":{"egress":"pool-b"}}}`, nil, by},
		{"removing another label", `{"metadata":{"labels":{"egress":null}}}`, nil, by},
		{"ovn-kubernetes' node subnets", `{"metadata":{"annotations":{"k8s.ovn.org/node-subnets":"{\"default\":[\"10.244.9.0/24\"]}"}}}`, nil, by},
		{"a new annotation", `{"metadata":{"annotations":{"x.example/y":"1"}}}`, nil, by},
		{"unschedulable", `{"spec":{"unschedulable":true}}`, nil, by},
		{"a taint", `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`, nil, by},
		// Refused by RBAC already (no nodes/status).
		{"its status", `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`, []string{"status"}, `cannot patch resource "nodes/status"`},
	} {
		if err := patch(c.body, c.sub...); err == nil || !strings.Contains(err.Error(), c.by) {
			t.Errorf("%s: %v, want refused by %s", c.what, err, c.by)
		}
	}
	if err := patch(`{"metadata":{"labels":{"egress-service.k8s.ovn.org/shop-web":null}}}`); err != nil {
		t.Errorf("the master cannot remove its host label: %v", err)
	}
	n, err := kube.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Labels) != 1 || n.Labels["egress"] != "pool-a" || n.Annotations["k8s.ovn.org/node-subnets"] != `{"default":["10.244.1.0/24"]}` ||
		len(n.Annotations) != 1 || n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "x" }) {
		t.Errorf("the Node after the refusals: labels %v, annotations %v, spec %+v", n.Labels, n.Annotations, n.Spec)
	}
}
