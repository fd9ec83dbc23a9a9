package conformance

import (
	"maps"
	"net/http"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// dryRun=All on create, update, patch and delete, of the object and of its
// status: the answer shows the change, and nothing is persisted.
func TestDryRunAll(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	orig := setHost(t, create(t, ns, "web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP}), "node-1")
	dry := map[string]string{"dryRun": "All"}
	obj := func(name, spec string) string {
		return `{` + kindES + `,"metadata":{"name":"` + name + `","resourceVersion":"` + orig.ResourceVersion + `"},"spec":` + spec + `,"status":{"host":"node-9"}}`
	}

	for _, tc := range []struct {
		name string
		req  request
		code int
		// check looks at the answer, which must show the would-be result.
		check func(es *egressv1.EgressService) bool
	}{
		{"create", request{method: http.MethodPost, path: collectionPath(ns), contentType: "application/json",
			body: `{` + kindES + `,"metadata":{"name":"new"},"spec":{"sourceIPBy":"Network"}}`},
			http.StatusCreated, func(es *egressv1.EgressService) bool {
				return es.Name == "new" && es.Spec.SourceIPBy == egressv1.Network
			}},
		{"update", request{method: http.MethodPut, path: collectionPath(ns, "web"), contentType: "application/json",
			body: obj("web", `{"sourceIPBy":"Network"}`)},
			http.StatusOK, func(es *egressv1.EgressService) bool {
				return es.Spec.SourceIPBy == egressv1.Network && es.Generation == 2
			}},
		{"merge patch", request{method: http.MethodPatch, path: collectionPath(ns, "web"), contentType: mergeCT,
			body: `{"spec":{"network":"blue"}}`},
			http.StatusOK, func(es *egressv1.EgressService) bool { return es.Spec.Network == "blue" }},
		{"apply patch", request{method: http.MethodPatch, path: collectionPath(ns, "web"), contentType: applyCT,
			params: map[string]string{"fieldManager": "dry"}, body: `{` + kindES + `,"metadata":{"name":"web"},"spec":{"network":"green"}}`},
			http.StatusOK, func(es *egressv1.EgressService) bool { return es.Spec.Network == "green" }},
		{"update status", request{method: http.MethodPut, path: collectionPath(ns, "web", "status"), contentType: "application/json",
			body: obj("web", `{"sourceIPBy":"LoadBalancerIP"}`)},
			http.StatusOK, func(es *egressv1.EgressService) bool { return es.Status.Host == "node-9" }},
		{"patch status", request{method: http.MethodPatch, path: collectionPath(ns, "web", "status"), contentType: mergeCT,
			body: `{"status":{"host":"node-8"}}`},
			http.StatusOK, func(es *egressv1.EgressService) bool { return es.Status.Host == "node-8" }},
		{"delete", request{method: http.MethodDelete, path: collectionPath(ns, "web")},
			http.StatusOK, func(*egressv1.EgressService) bool { return true }},
	} {
		tc.req.params = merged(tc.req.params, dry)
		resp := do(t, admin(), tc.req)
		if resp.code != tc.code {
			t.Errorf("%s: %d %v; want %d", tc.name, resp.code, resp.err, tc.code)
			continue
		}
		if tc.name != "delete" && !tc.check(object(t, resp.body)) {
			t.Errorf("%s: the answer does not show the change:\n%s", tc.name, resp.body)
		}
		if got := get(t, ns, "web"); got.ResourceVersion != orig.ResourceVersion || !equalSpec(got.Spec, orig.Spec) || !reflect.DeepEqual(got.Status, orig.Status) {
			t.Errorf("%s: stored object changed: %+v %+v (rv %s); want %+v %+v (rv %s)", tc.name,
				got.Spec, got.Status, got.ResourceVersion, orig.Spec, orig.Status, orig.ResourceVersion)
		}
	}
	if got := names(t, ns, metav1.ListOptions{}); len(got) != 1 || got[0] != "web" {
		t.Errorf("objects after the dry runs: %v; want only [web]", got)
	}

	// Dry runs still validate, and an unknown directive is refused.
	resp := do(t, admin(), request{method: http.MethodPost, path: collectionPath(ns), contentType: "application/json",
		params: dry, body: `{` + kindES + `,"metadata":{"name":"bad"},"spec":{"sourceIPBy":"Foo"}}`})
	if !apierrors.IsInvalid(resp.err) {
		t.Errorf("dry-run create of an invalid object: %d %v; want 422", resp.code, resp.err)
	}
	resp = do(t, admin(), request{method: http.MethodPost, path: collectionPath(ns), contentType: "application/json",
		params: map[string]string{"dryRun": "Foo"}, body: `{` + kindES + `,"metadata":{"name":"bad"}}`})
	if !apierrors.IsInvalid(resp.err) || !strings.Contains(resp.err.Error(), `dryRun: Unsupported value: ["Foo"]: supported values: "All"`) {
		t.Errorf("dryRun=Foo: %d %v; want 422 naming the supported value All", resp.code, resp.err)
	}
	if got := names(t, ns, metav1.ListOptions{}); len(got) != 1 {
		t.Errorf("objects after the refused requests: %v; want only [web]", got)
	}
}

func merged(a, b map[string]string) map[string]string {
	out := maps.Clone(b)
	maps.Copy(out, a)
	return out
}
