package informer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
)

func TestStripManagedFields(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	for _, obj := range []metav1.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: mf, Labels: map[string]string{"a": "b"}}},
		&egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Name: "e", ManagedFields: mf}},
	} {
		out, err := StripManagedFields(obj)
		if err != nil {
			t.Fatal(err)
		}
		m := out.(metav1.Object)
		if m.GetManagedFields() != nil || m.GetName() == "" {
			t.Errorf("%s: managedFields %v, name %q", obj.GetName(), m.GetManagedFields(), m.GetName())
		}
	}
	if svc := (&corev1.Service{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}}); true {
		out, _ := StripManagedFields(svc)
		if out.(*corev1.Service).Labels["a"] != "b" {
			t.Errorf("other metadata lost")
		}
	}
	// A tombstone is passed through as it is.
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: &corev1.Service{}}
	if out, err := StripManagedFields(tomb); err != nil || out.(cache.DeletedFinalStateUnknown).Key != "ns/x" {
		t.Errorf("tombstone: %v, %v", out, err)
	}
}
