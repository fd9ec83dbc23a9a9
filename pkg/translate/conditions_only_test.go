package translate

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestConditionsOnly: an update that changed only status.conditions (and
// the resourceVersion and managedFields that come with any write) is told
// apart from one that changed anything else.
func TestConditionsOnly(t *testing.T) {
	base := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: "1", Labels: map[string]string{"a": "b"}},
		Spec: egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP}, Status: egressv1.EgressServiceStatus{Host: "node2"}}
	for _, tc := range []struct {
		name   string
		change func(*egressv1.EgressService)
		want   bool
	}{
		{"conditions written", func(e *egressv1.EgressService) {
			e.ResourceVersion = "2"
			e.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "ovn-egress-status"}}
			e.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}}
		}, true},
		{"nothing but the version", func(e *egressv1.EgressService) { e.ResourceVersion = "2" }, true},
		{"host", func(e *egressv1.EgressService) { e.ResourceVersion, e.Status.Host = "2", "node3" }, false},
		{"spec", func(e *egressv1.EgressService) { e.ResourceVersion, e.Spec.Network = "2", "100" }, false},
		{"label", func(e *egressv1.EgressService) { e.ResourceVersion, e.Labels = "2", nil }, false},
		{"deleted", func(e *egressv1.EgressService) {
			now := metav1.Now()
			e.ResourceVersion, e.DeletionTimestamp = "2", &now
		}, false},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := ConditionsOnly(base, cur); got != tc.want {
			t.Errorf("%s: ConditionsOnly = %v, want %v", tc.name, got, tc.want)
		}
		if base.ResourceVersion != "1" || base.Status.Host != "node2" {
			t.Fatalf("%s: ConditionsOnly changed its argument: %+v", tc.name, base)
		}
	}
	if ConditionsOnly(nil, base) || ConditionsOnly(base, nil) {
		t.Error("an add or a delete counted as a conditions-only update")
	}
}
