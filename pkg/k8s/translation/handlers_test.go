package translation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeChanged: only what translation reads from a Node re-translates
// its host; label patches (a drain patches every host that gained or lost
// services) and readiness flips do not.
func TestNodeChanged(t *testing.T) {
	base := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{"a": "1"},
			Annotations: map[string]string{"k8s.ovn.org/node-subnets": `{"default":["10.244.1.0/24"]}`}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.2"}},
		},
	}
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{"heartbeat", func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.Now() }, false},
		{"label added", func(n *corev1.Node) { n.Labels["egress-service.k8s.ovn.org/ns-svc"] = "" }, false},
		{"labels removed", func(n *corev1.Node) { n.Labels = nil }, false},
		{"not ready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, false},
		{"annotation changed", func(n *corev1.Node) { n.Annotations["k8s.ovn.org/node-subnets"] = `{"default":["10.244.9.0/24"]}` }, true},
		{"annotation added", func(n *corev1.Node) { n.Annotations["ovn-egress.io/programmed"] = "{}" }, true},
		{"address changed", func(n *corev1.Node) { n.Status.Addresses[0].Address = "172.18.0.9" }, true},
		{"address added", func(n *corev1.Node) {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fc00::2"})
		}, true},
	} {
		cur := base.DeepCopy()
		tc.change(cur)
		if got := nodeChanged(base, cur); got != tc.want {
			t.Errorf("%s: nodeChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !nodeChanged("not a node", base) {
		t.Errorf("an unexpected object must count as a change")
	}
}
