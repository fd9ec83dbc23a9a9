package informer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
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
	out, err := Slim(p)
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
	if svc, _ := Slim(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{}}}}); svc.(*corev1.Service).ManagedFields != nil {
		t.Error("another type keeps its managedFields")
	}
}

// TestSlimNodeAndSlice: a cached Node keeps what translation, host
// selection and the health checks read, a cached EndpointSlice what
// translation and the agents read; the kubelet's and the EndpointSlice
// controller's additions are dropped.
func TestSlimNodeAndSlice(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "u1", ResourceVersion: "9", Labels: map[string]string{"egress": "yes"},
			Annotations: map[string]string{"k8s.ovn.org/node-subnets": `{"default":["10.244.1.0/24"]}`,
				corev1.LastAppliedConfigAnnotation: `{"kind":"Node"}`}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}},
			PodCIDR: "10.244.1.0/24", ProviderID: "aws:///i-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/app@sha256:0123", "registry.example/app:v1"}, SizeBytes: 1 << 20}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.34.1", OSImage: "Debian GNU/Linux 12 (bookworm)"}},
	}
	out, err := Slim(n)
	if err != nil {
		t.Fatal(err)
	}
	sn := out.(*corev1.Node)
	if sn.Name != "node1" || sn.UID != "u1" || sn.Labels["egress"] != "yes" || sn.Annotations["k8s.ovn.org/node-subnets"] == "" ||
		!sn.Spec.Unschedulable || len(sn.Spec.Taints) != 1 || len(sn.Status.Addresses) != 1 || len(sn.Status.Conditions) != 1 {
		t.Errorf("slim node lost a fact ovn-egress reads: %+v", sn)
	}
	if sn.Status.Images != nil || sn.Status.NodeInfo.KubeletVersion != "" || sn.Spec.PodCIDR != "" || sn.Spec.ProviderID != "" ||
		sn.Annotations[corev1.LastAppliedConfigAnnotation] != "" {
		t.Errorf("slim node kept what nothing reads: %+v", sn)
	}
	if n.Annotations[corev1.LastAppliedConfigAnnotation] == "" {
		t.Error("Slim changed the object it was given")
	}

	ready, zone := true, "zone-a"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T00:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "web"}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName: ptr("node1"), Zone: &zone, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-1", UID: "p1"}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http")}},
	}
	out, err = Slim(s)
	if err != nil {
		t.Fatal(err)
	}
	ss := out.(*discoveryv1.EndpointSlice)
	if ss.Name != "web-abcde" || ss.Labels[discoveryv1.LabelServiceName] != "web" || ss.AddressType != discoveryv1.AddressTypeIPv4 ||
		len(ss.Endpoints) != 1 || ss.Endpoints[0].Addresses[0] != "10.244.1.5" || *ss.Endpoints[0].NodeName != "node1" ||
		!*ss.Endpoints[0].Conditions.Ready {
		t.Errorf("slim slice lost a fact ovn-egress reads: %+v", ss)
	}
	if ss.Endpoints[0].TargetRef != nil || ss.Endpoints[0].Zone != nil || ss.Ports != nil || ss.Annotations != nil || ss.OwnerReferences != nil {
		t.Errorf("slim slice kept what nothing reads: %+v", ss)
	}
	t.Logf("a node of %d bytes (protobuf) is cached in %d, a slice of %d in %d", n.Size(), sn.Size(), s.Size(), ss.Size())
}

func ptr[T any](v T) *T { return &v }

// TestAgentsCacheNoConditions: the agents' EgressServices keep spec and
// status.host, not the conditions the master writes.
func TestAgentsCacheNoConditions(t *testing.T) {
	es := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Name: "e", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec:   egressv1.EgressServiceSpec{Network: "100"},
		Status: egressv1.EgressServiceStatus{Host: "node2", Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready"}}}}
	out, err := withoutConditions(es)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*egressv1.EgressService)
	if got.Status.Conditions != nil || got.ManagedFields != nil || got.Status.Host != "node2" || got.Spec.Network != "100" {
		t.Errorf("cached %+v, want host and spec without conditions and managedFields", got)
	}
}
