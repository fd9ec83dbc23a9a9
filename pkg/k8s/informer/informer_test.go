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

// TestSlimPod: a cached Pod keeps what EgressIP selection reads and drops
// the rest; a realistic pod shrinks to a fraction of its size.
func TestSlimPod(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{"k8s.ovn.org/pod-networks": `{"default":{"ip_addresses":["10.244.1.5/24"],"mac_address":"0a:58:0a:f4:01:05"}}`},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-5d8f"}}},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "web", Image: "web:1.2.3",
			Env: []corev1.EnvVar{{Name: "MODE", Value: "production"}}, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
			Volumes: []corev1.Volume{{Name: "token"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}},
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, ImageID: "sha256:0123456789abcdef"}}},
	}
	out, err := SlimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*corev1.Pod)
	if s.Name != "web-1" || s.Namespace != "shop" || s.Labels["app"] != "web" || s.Spec.NodeName != "node1" || s.Spec.HostNetwork ||
		s.Status.Phase != corev1.PodRunning || len(s.Status.PodIPs) != 2 || s.ResourceVersion != "7" {
		t.Errorf("slim pod lost a fact selection reads: %+v", s)
	}
	if s.Annotations != nil || s.ManagedFields != nil || s.Spec.Containers != nil || s.Status.Conditions != nil || s.OwnerReferences != nil {
		t.Errorf("slim pod kept what nothing reads: %+v", s)
	}
	full, slim := p.Size(), s.Size()
	t.Logf("a pod of %d bytes (protobuf) is cached in %d", full, slim)
	if slim*2 > full {
		t.Errorf("slim pod %d bytes of %d", slim, full)
	}
	if svc, _ := SlimPod(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{}}}}); svc.(*corev1.Service).ManagedFields != nil {
		t.Error("another type keeps its managedFields")
	}
}
