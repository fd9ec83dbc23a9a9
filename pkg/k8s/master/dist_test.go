package master_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
