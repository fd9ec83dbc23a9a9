package conformance

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
)

// eips is the EgressIP clientset on the admin's config.
func eips(t *testing.T) eipclient.Interface {
	t.Helper()
	c, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eipName makes a cluster-scoped name unique to the test (the tests share
// one API server and run in parallel).
func eipName(t *testing.T, name string) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())) + "-" + name
}

// createEIP posts a raw EgressIP spec, as a user writes it.
func createEIP(t *testing.T, name, spec string) response {
	t.Helper()
	body := fmt.Sprintf(`{"apiVersion":"k8s.ovn.org/v1","kind":"EgressIP","metadata":{"name":%q},"spec":%s}`, name, spec)
	resp := do(t, eips(t).K8sV1().RESTClient(), request{method: http.MethodPost, path: group + "/egressips", contentType: "application/json", body: body})
	if resp.code < 300 {
		t.Cleanup(func() { _ = eips(t).K8sV1().EgressIPs().Delete(t.Context(), name, metav1.DeleteOptions{}) })
	}
	return resp
}

// Objects valid under ovn-kubernetes' EgressIP CRD are valid here: both
// families, several IPs, both selectors, an empty egressIPs list, and a
// status of items sent with the object.
func TestEgressIPAcceptsUpstreamObjects(t *testing.T) {
	t.Parallel()
	for name, spec := range map[string]string{
		"dual":      `{"egressIPs":["172.18.0.100","fc00:f853:ccd:e793::100"],"namespaceSelector":{"matchLabels":{"env":"prod"}}}`,
		"pods":      `{"egressIPs":["172.18.0.101"],"namespaceSelector":{"matchExpressions":[{"key":"env","operator":"In","values":["prod","qa"]}]},"podSelector":{"matchLabels":{"app":"web"}}}`,
		"empty-ips": `{"egressIPs":[],"namespaceSelector":{}}`,
		"exists":    `{"egressIPs":["10.0.0.1"],"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"Exists"}]}}`,
	} {
		if resp := createEIP(t, eipName(t, name), spec); resp.code != http.StatusCreated {
			t.Errorf("%s: %d %v; want 201", name, resp.code, resp.err)
		}
	}
}

// Invalid EgressIPs are refused with a message a user can act on.
func TestEgressIPValidationRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, spec, cause string }{
		{"not-an-ip", `{"egressIPs":["172.18.0.300"],"namespaceSelector":{}}`, "every egressIPs item must be an IPv4 or IPv6 address"},
		{"cidr", `{"egressIPs":["172.18.0.0/24"],"namespaceSelector":{}}`, "every egressIPs item must be an IPv4 or IPv6 address"},
		{"repeated", `{"egressIPs":["172.18.0.100","172.18.0.100"],"namespaceSelector":{}}`, "egressIPs must not repeat an address"},
		{"no-ips", `{"namespaceSelector":{}}`, `spec.egressIPs: Required value`},
		{"no-namespace-selector", `{"egressIPs":["172.18.0.100"]}`, `spec.namespaceSelector: Required value`},
		{"bad-operator", `{"egressIPs":["172.18.0.100"],"namespaceSelector":{"matchExpressions":[{"key":"a","operator":"Near","values":["b"]}]}}`,
			"matchExpressions: operator must be one of In, NotIn, Exists, DoesNotExist"},
		{"in-without-values", `{"egressIPs":["172.18.0.100"],"namespaceSelector":{},"podSelector":{"matchExpressions":[{"key":"a","operator":"In"}]}}`,
			"matchExpressions: values must be non-empty when operator is In or NotIn"},
	} {
		resp := createEIP(t, eipName(t, tc.name), tc.spec)
		if resp.code != http.StatusUnprocessableEntity || resp.err == nil || !strings.Contains(resp.err.Error(), tc.cause) {
			t.Errorf("%s: %d %v; want 422 naming %q", tc.name, resp.code, resp.err, tc.cause)
		}
	}
}

// TestEgressIPStatusAndColumns: the CRD has no status subresource, as
// upstream's has none, so status is written on the main resource — the way
// ovn-kubernetes' own EgressIP controller writes it (a JSON patch replacing
// /status, its user agent "<host>/ovnkube@<commit>"), read back unchanged,
// and the way ovn-egress's master writes it (a merge patch of
// status.items). Applied over upstream's CRD, ovn-egress's changes nothing
// about how ovnkube's writes land.
func TestEgressIPStatusAndColumns(t *testing.T) {
	t.Parallel()
	c := eips(t).K8sV1().EgressIPs()
	name := eipName(t, "web")
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: egressipv1.EgressIPSpec{
		EgressIPs:         []string{"172.18.0.100", "172.18.0.101"},
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	if _, err := c.Create(t.Context(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(t.Context(), name, metav1.DeleteOptions{}) })

	// ovnkube's cluster-manager: JSON patch of /status on the main resource.
	ovnkube := rest.CopyConfig(kube.Config)
	ovnkube.UserAgent = "control-plane-1/ovnkube@8871cd9c (linux/amd64) kubernetes/v0.0.0"
	ovnk, err := eipclient.NewForConfig(ovnkube)
	if err != nil {
		t.Fatal(err)
	}
	jp := `[{"op":"replace","path":"/status","value":{"items":[{"node":"node1","egressIP":"172.18.0.100"},{"node":"node2","egressIP":"172.18.0.101"}]}}]`
	if _, err = ovnk.K8sV1().EgressIPs().Patch(t.Context(), name, types.JSONPatchType, []byte(jp), metav1.PatchOptions{}); err != nil {
		t.Fatalf("ovnkube's status patch: %v", err)
	}
	got, err := c.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []egressipv1.EgressIPStatusItem{{Node: "node1", EgressIP: "172.18.0.100"}, {Node: "node2", EgressIP: "172.18.0.101"}}
	if !slices.Equal(got.Status.Items, want) {
		t.Errorf("status after ovnkube's JSON patch: %+v; want %+v (stored, not dropped)", got.Status.Items, want)
	}
	// ovn-egress's master: a merge patch of status.items on the main resource.
	mp := `{"status":{"items":[{"node":"node3","egressIP":"172.18.0.100"}]}}`
	if got, err = c.Patch(t.Context(), name, types.MergePatchType, []byte(mp), metav1.PatchOptions{FieldManager: "ovn-egress-egressip"}); err != nil {
		t.Fatalf("the master's status patch: %v", err)
	}
	if len(got.Status.Items) != 1 || got.Status.Items[0].Node != "node3" {
		t.Errorf("status after the master's merge patch: %+v", got.Status.Items)
	}
	// A spec change from a fresh copy keeps status (it carries it).
	got.Spec.EgressIPs = append(got.Spec.EgressIPs, "172.18.0.102")
	if got, err = c.Update(t.Context(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Items) != 1 || len(got.Spec.EgressIPs) != 3 {
		t.Errorf("an update of the spec: status %+v spec %v; want status kept and spec changed", got.Status, got.Spec.EgressIPs)
	}
	bad := `{"status":{"items":[{"node":"` + strings.Repeat("n", 254) + `","egressIP":"172.18.0.100"}]}}`
	if _, err := c.Patch(t.Context(), name, types.MergePatchType, []byte(bad), metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a node name of 254 characters in status: %v; want Invalid", err)
	}
	mp = `{"status":{"items":[{"node":"node1","egressIP":"172.18.0.100"},{"node":"node2","egressIP":"172.18.0.101"}],` +
		`"conditions":[{"type":"Ready","status":"False","reason":"NoMatchingNodeFound","message":"Assigned: 1 of 3 unassigned","lastTransitionTime":"2026-12-07T00:00:00Z"}]}}`
	if _, err = c.Patch(t.Context(), name, types.MergePatchType, []byte(mp), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, resource := range []string{"egressips", "eip"} {
		out, err := kube.Kubectl("get", resource, name)
		if err != nil {
			t.Fatalf("kubectl get %s: %v\n%s", resource, err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl get %s: %q", resource, out)
		}
		if head := strings.Fields(lines[0]); !slices.Equal(head, []string{"NAME", "EGRESSIPS", "ASSIGNED", "NODE", "ASSIGNED", "EGRESSIPS", "READY", "REASON"}) {
			t.Errorf("columns %q; want NAME, EGRESSIPS, ASSIGNED NODE, ASSIGNED EGRESSIPS, READY, REASON", lines[0])
		}
		// A printer column's [*] shows the first element only (the API
		// server's column printer, as for upstream's CRD).
		if row := strings.Fields(lines[1]); !slices.Equal(row, []string{name, "172.18.0.100", "node1", "172.18.0.100", "False", "NoMatchingNodeFound"}) {
			t.Errorf("row %q", lines[1])
		}
	}
}
