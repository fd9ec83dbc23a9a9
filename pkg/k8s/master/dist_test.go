package master_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestDistManifestsApply: every manifest in dist/ (central and
// interconnect) is accepted by a real API server.
func TestDistManifestsApply(t *testing.T) {
	ctx := context.Background()
	for _, set := range [][]string{
		{"../../../dist/namespace.yaml", "../../../dist/crds", "../../../dist/master", "../../../dist/node"},
		{"../../../dist/ic"},
	} {
		if err := kube.Apply(ctx, set...); err != nil {
			t.Fatalf("apply %v: %v", set, err)
		}
		dep, err := kube.Client.AppsV1().Deployments("ovn-egress").Get(ctx, "ovn-egress-master", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := kube.Client.AppsV1().DaemonSets("ovn-egress").Get(ctx, "ovn-egress-node", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkProbes(t, set[0], dep.Spec.Template.Spec.Containers[0])
		checkProbes(t, set[0], ds.Spec.Template.Spec.Containers[0])
	}
	ds, err := kube.Client.AppsV1().DaemonSets("ovn-egress").Get(ctx, "ovn-egress-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--zone=$(NODE_NAME)") {
		t.Errorf("interconnect DaemonSet args: %s", args)
	}
}

// checkProbes: the container serves --metrics-address on a port named
// metrics, and its liveness and readiness probes ask /healthz and /readyz
// there.
func checkProbes(t *testing.T, set string, c corev1.Container) {
	t.Helper()
	var port int32
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			port = p.ContainerPort
		}
	}
	if port == 0 || !slices.Contains(c.Args, fmt.Sprintf("--metrics-address=:%d", port)) {
		t.Errorf("%s %s: metrics port %d, args %v", set, c.Name, port, c.Args)
	}
	for _, pr := range []struct {
		what, path string
		p          *corev1.Probe
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s %s: %s probe %+v, want GET %s on port metrics", set, c.Name, pr.what, pr.p, pr.path)
		}
	}
}

// TestNodeAgentChangesOnlyItsOwnNode: with dist/node's admission policies,
// an agent token bound to a pod on node A may write A's readiness report
// (its ConfigMap, and the Node annotation an older release used) and
// nothing else — not B's report, not A's labels, another annotation, spec
// or status — and a token bound to no pod (no node claim) may write none.
func TestNodeAgentChangesOnlyItsOwnNode(t *testing.T) {
	ctx := context.Background()
	if err := kube.Apply(ctx, "../../../dist/namespace.yaml", "../../../dist/node"); err != nil {
		t.Fatal(err)
	}
	const ns, sa = "ovn-egress", "ovn-egress-node"
	for _, n := range []string{"vap-a", "vap-b"} {
		_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Annotations: map[string]string{"other.example/x": "1"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.Client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	// The agent's pod on vap-a (no kubelet runs it: the token only needs it
	// to exist) and a token bound to it, as the kubelet mounts one.
	pod, err := kube.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-vap-a"},
		Spec: corev1.PodSpec{NodeName: "vap-a", ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "node", Image: "ovn-egress"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.Client.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	expiry := int64(3600)
	tr, err := kube.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &expiry, BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentA := clientWithToken(t, tr.Status.Token)
	unbound, err := kube.ServiceAccountConfig(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	agentNoNode, err := kubernetes.NewForConfig(unbound)
	if err != nil {
		t.Fatal(err)
	}

	patch := func(c kubernetes.Interface, node, body string, sub ...string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
		return err
	}
	report := func(v string) string { return `{"metadata":{"annotations":{"ovn-egress.io/programmed":"` + v + `"}}}` }
	// The policy takes effect a moment after its creation (the API server
	// loads it asynchronously, and RBAC too): wait until the policy's own
	// refusal shows — not any error — then check every case.
	waitRefusedBy(t, "ValidatingAdmissionPolicy 'ovn-egress-node'", "node A's agent writing node B's report",
		func() error { return patch(agentA, "vap-b", report("{}")) })
	// An older release's report annotation, as its agent left it: the
	// agent may remove it, never write it.
	if err := patch(kube.Client, "vap-a", report(`{\"ns/web\":{}}`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, node, body string
		sub              []string
		client           kubernetes.Interface
	}{
		{"node B's report", "vap-b", report("{}"), nil, agentA},
		{"its own report in the annotation", "vap-a", report("{}"), nil, agentA},
		{"its own labels", "vap-a", `{"metadata":{"labels":{"egress":"yes"}}}`, nil, agentA},
		{"another annotation", "vap-a", `{"metadata":{"annotations":{"other.example/x":"2"}}}`, nil, agentA},
		{"removing another annotation", "vap-a", `{"metadata":{"annotations":{"other.example/x":null}}}`, nil, agentA},
		{"its spec", "vap-a", `{"spec":{"unschedulable":true}}`, nil, agentA},
		// Status is refused by RBAC already (no nodes/status); the policy
		// refuses it too, should RBAC ever grant it.
		{"its status", "vap-a", `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`, []string{"status"}, agentA},
		{"a report with a token bound to no pod", "vap-a", report("{}"), nil, agentNoNode},
	} {
		err := patch(c.client, c.node, c.body, c.sub...)
		by := "ValidatingAdmissionPolicy 'ovn-egress-node'"
		if c.sub != nil {
			by = `cannot patch resource "nodes/status"`
		}
		if err == nil || !strings.Contains(err.Error(), by) {
			t.Errorf("%s: %v, want refused by %s", c.what, err, by)
		}
	}
	n, err := kube.Client.CoreV1().Nodes().Get(ctx, "vap-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Annotations["ovn-egress.io/programmed"] != `{"ns/web":{}}` || n.Annotations["other.example/x"] != "1" || len(n.Labels) != 0 || n.Spec.Unschedulable {
		t.Errorf("node A after the refusals: annotations %v, labels %v, unschedulable %v", n.Annotations, n.Labels, n.Spec.Unschedulable)
	}
	if err := patch(agentA, "vap-a", `{"metadata":{"annotations":{"ovn-egress.io/programmed":null}}}`); err != nil {
		t.Errorf("node A's agent cannot remove the older release's report annotation: %v", err)
	}
	checkReportConfigMaps(t, agentA, agentNoNode)
}

// checkReportConfigMaps: the report ConfigMap's policy lets node A's agent
// write ovn-egress-report.vap-a naming vap-a, and nothing else: not B's
// report, not its own report claiming to be B's, not another ConfigMap, not
// deleting B's; a token bound to no pod writes none.
func checkReportConfigMaps(t *testing.T, agentA, agentNoNode kubernetes.Interface) {
	ctx := context.Background()
	const ns = "ovn-egress"
	cm := func(name, node string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{translate.ReportLabel: ""}},
			Data: map[string]string{translate.ReportNodeKey: node, translate.ReportDataKey: "{}"}}
	}
	create := func(c kubernetes.Interface, name, node string) error {
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm(name, node), metav1.CreateOptions{})
		if err == nil {
			t.Cleanup(func() {
				_ = kube.Client.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		}
		return err
	}
	if _, err := kube.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm("ovn-egress-report.vap-b", "vap-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.Client.CoreV1().ConfigMaps(ns).Delete(context.Background(), "ovn-egress-report.vap-b", metav1.DeleteOptions{})
	})
	// Wait for the policy's own refusal; a create that succeeds before the
	// policy is loaded is deleted again, so the next try is a create again
	// (not an AlreadyExists that would end the wait early).
	waitRefusedBy(t, "ValidatingAdmissionPolicy 'ovn-egress-node-report'", "node A's agent writing node x's report", func() error {
		_, err := agentA.CoreV1().ConfigMaps(ns).Create(ctx, cm("ovn-egress-report.vap-x", "vap-x"), metav1.CreateOptions{})
		if err == nil {
			_ = kube.Client.CoreV1().ConfigMaps(ns).Delete(ctx, "ovn-egress-report.vap-x", metav1.DeleteOptions{})
		}
		return err
	})
	for _, name := range []string{"ovn-egress-report.vap-a", "ovn-egress-report-1.vap-a", "ovn-egress-report-12.vap-a", "ovn-egress-report-63.vap-a"} {
		if err := create(agentA, name, "vap-a"); err != nil {
			t.Fatalf("node A's agent cannot create its own report %s: %v", name, err)
		}
	}
	if _, err := agentA.CoreV1().ConfigMaps(ns).Patch(ctx, "ovn-egress-report.vap-a", types.MergePatchType,
		[]byte(`{"data":{"programmed":"{\"ns/web\":{}}"}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("node A's agent cannot update its own report: %v", err)
	}
	const by = "ValidatingAdmissionPolicy 'ovn-egress-node-report'"
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"node B's report", func() error { return create(agentA, "ovn-egress-report.vap-b2", "vap-b2") }},
		{"a part of node x.vap-a's report", func() error { return create(agentA, "ovn-egress-report-1.x.vap-a", "vap-a") }},
		{"a part numbered 0", func() error { return create(agentA, "ovn-egress-report-0.vap-a", "vap-a") }},
		// At most ReportParts parts: a stolen token cannot fill etcd.
		{"a part numbered 64", func() error { return create(agentA, "ovn-egress-report-64.vap-a", "vap-a") }},
		{"a part numbered 9999", func() error { return create(agentA, "ovn-egress-report-9999.vap-a", "vap-a") }},
		{"its own report naming node B", func() error {
			_, err := agentA.CoreV1().ConfigMaps(ns).Patch(ctx, "ovn-egress-report.vap-a", types.MergePatchType, []byte(`{"data":{"node":"vap-b"}}`), metav1.PatchOptions{})
			return err
		}},
		{"another ConfigMap", func() error { return create(agentA, "kube-root-ca.crt.fake", "vap-a") }},
		{"deleting node B's report", func() error {
			return agentA.CoreV1().ConfigMaps(ns).Delete(ctx, "ovn-egress-report.vap-b", metav1.DeleteOptions{})
		}},
		{"a report with a token bound to no pod", func() error { return create(agentNoNode, "ovn-egress-report.vap-a2", "vap-a2") }},
	} {
		if err := c.do(); err == nil || !strings.Contains(err.Error(), by) {
			t.Errorf("%s: %v, want refused by %s", c.what, err, by)
		}
	}
	got, err := kube.Client.CoreV1().ConfigMaps(ns).Get(ctx, "ovn-egress-report.vap-a", metav1.GetOptions{})
	if err != nil || got.Data["node"] != "vap-a" || got.Data["programmed"] != `{"ns/web":{}}` {
		t.Errorf("node A's report after the refusals: %v (%v)", got.Data, err)
	}
}

// waitRefusedBy retries try until it fails with an error naming by (an
// admission policy loads a moment after its creation); any other outcome —
// success, or another error — is retried until 30 s pass.
func waitRefusedBy(t *testing.T, by, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := try()
		if err != nil && strings.Contains(err.Error(), by) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v 30 s after the policy was applied, want refused by %s", what, err, by)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clientWithToken(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(kube.Config)
	cfg.BearerToken = token
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
