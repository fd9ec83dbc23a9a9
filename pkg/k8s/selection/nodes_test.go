package selection_test

import (
	"context"
	"encoding/json"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

func setReady(t *testing.T, node string, ready bool) {
	t.Helper()
	ctx := context.Background()
	n, err := kube.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	if _, err := kube.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// patchLabels merges labels into a node (nil deletes).
func patchLabels(t *testing.T, node string, labels map[string]*string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if _, err := kube.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestNodeChanges is upstream's "node changes" case (§4.2 7): the host
// going NotReady drains it, a node relabelled to match gets an unassigned
// service, bogus egress-service labels are removed, a label removed by hand
// is put back, and deleting the host moves its service.
func TestNodeChanges(t *testing.T) {
	e := newEnv(t)
	c, _ := e.start(selection.Config{}, kube.Config)
	e.create("svc1", []string{"172.18.0.100"}, []string{"10.244.1.5@node1"}, withSelector(map[string]string{"kubernetes.io/hostname": "node1"}))
	e.create("svc2", []string{"172.18.0.101"}, []string{"10.244.1.6@node1"}, withSelector(map[string]string{"egress": "svc2"}))
	e.waitHost("svc1", "node1")
	e.waitEvent("svc2", translate.ReasonNoEligibleNode, "3 not matching")

	setReady(t, "node1", false)
	e.waitHost("svc1", "")
	e.waitEvent("svc1", translate.ReasonNoEligibleNode, "1 not Ready, 2 not matching")
	e.waitLabels(map[string][]string{})

	patchLabels(t, "node2", map[string]*string{"egress": ptr("svc2")})
	e.waitHost("svc2", "node2")
	e.waitLabels(map[string][]string{"node2": {e.label("svc2")}})

	// Bogus labels go; a removed label comes back.
	patchLabels(t, "node3", map[string]*string{hosts.NodeLabelPrefix + "ghost-svc": ptr(""), "keep.me/too": ptr("yes")})
	patchLabels(t, "node2", map[string]*string{e.label("svc2"): nil, hosts.NodeLabelPrefix + "other-ns-svc": ptr("x")})
	e.waitLabels(map[string][]string{"node2": {e.label("svc2")}})
	n3, err := kube.Client.CoreV1().Nodes().Get(context.Background(), "node3", metav1.GetOptions{})
	if err != nil || n3.Labels["keep.me/too"] != "yes" {
		t.Fatalf("a label not owned by host selection was touched: %v %v", n3.Labels, err)
	}

	// node1 Ready again: svc1 comes back (it had no host).
	setReady(t, "node1", true)
	e.waitHost("svc1", "node1")

	// Deleting the host: svc2 can go to node3 once it matches.
	patchLabels(t, "node3", map[string]*string{"egress": ptr("svc2")})
	if err := kube.Client.CoreV1().Nodes().Delete(context.Background(), "node2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHost("svc2", "node3")
	e.waitEvent("svc2", hosts.ReasonHostChanged, "from node2 to node3: node node2 no longer exists")
	e.waitLabels(map[string][]string{"node1": {e.label("svc1")}, "node3": {e.label("svc2")}})
	e.settle(c)
	if st := c.Stats(); st.Errors != 0 {
		t.Errorf("errors: %+v", st)
	}
}

// TestExternalTrafficPolicyLocal is upstream's ETP=Local case (§4.2 6): no
// endpoint on the selected node → no host and no label; an endpoint added
// there → host and label; that endpoint removed (and one without nodeName
// added) → no host, label removed.
func TestExternalTrafficPolicyLocal(t *testing.T) {
	e := newEnv(t)
	e.start(selection.Config{}, kube.Config)
	kube.CreateLoadBalancer(t, e.ns, "web", []string{"172.18.0.100"}, "10.244.2.5@node2")
	svc, err := kube.Client.CoreV1().Services(e.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := kube.Client.CoreV1().Services(e.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createES("web", onNode("node1"))
	e.waitEvent("web", translate.ReasonNoEligibleNode, "without an endpoint of the Service")
	if h := e.host("web"); h != "" {
		t.Fatalf("host %q without a local endpoint", h)
	}

	kube.SetEndpoints(t, e.ns, "web", "10.244.2.5@node2", "10.244.1.5@node1")
	e.waitHost("web", "node1")
	e.waitLabels(map[string][]string{"node1": {e.label("web")}})

	kube.SetEndpoints(t, e.ns, "web", "10.244.2.5@node2", "10.244.1.9")
	e.waitHost("web", "")
	e.waitLabels(map[string][]string{})
}

// TestLongNameLabel: a namespace and name too long for a label name still
// give a valid label on the host.
func TestLongNameLabel(t *testing.T) {
	e := newEnv(t)
	e.start(selection.Config{}, kube.Config)
	name := "a-service-whose-name-is-quite-long-for-a-label-on-a-node-yes"
	e.create(name, []string{"172.18.0.100"}, []string{"10.244.1.5@node1"})
	e.waitHost(name, "node1")
	e.waitLabels(map[string][]string{"node1": {hosts.NodeLabel(e.ns, name)}})
	if l := hosts.NodeLabel(e.ns, name); len(l) != len(hosts.NodeLabelPrefix)+63 {
		t.Fatalf("label %q was not shortened", l)
	}
}
