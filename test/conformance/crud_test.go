package conformance

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// GET /apis/k8s.ovn.org/v1/egressservices lists across namespaces.
func TestListAllNamespaces(t *testing.T) {
	t.Parallel()
	ns1, ns2 := kube.Namespace(t), kube.Namespace(t)
	create(t, ns1, "a", egressv1.EgressServiceSpec{}, "run", ns1)
	create(t, ns2, "b", egressv1.EgressServiceSpec{}, "run", ns1)
	create(t, ns2, "other", egressv1.EgressServiceSpec{})

	resp := do(t, admin(), request{method: http.MethodGet, path: group + "/egressservices",
		params: map[string]string{"labelSelector": "run=" + ns1}})
	if resp.code != http.StatusOK {
		t.Fatalf("GET all namespaces: %d %v; want 200", resp.code, resp.err)
	}
	var list egressv1.EgressServiceList
	if err := json.Unmarshal(resp.body, &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, es := range list.Items {
		got = append(got, es.Namespace+"/"+es.Name)
	}
	slices.Sort(got)
	want := []string{ns1 + "/a", ns2 + "/b"}
	slices.Sort(want)
	if list.Kind != "EgressServiceList" || !slices.Equal(got, want) {
		t.Errorf("got kind %q items %v; want EgressServiceList %v", list.Kind, got, want)
	}
}

// GET (list), POST and DELETE (collection) of
// /apis/k8s.ovn.org/v1/namespaces/{namespace}/egressservices.
func TestNamespacedCollection(t *testing.T) {
	t.Parallel()
	ns, elsewhere := kube.Namespace(t), kube.Namespace(t)
	post := func(body string) response {
		return do(t, admin(), request{method: http.MethodPost, path: collectionPath(ns), contentType: "application/json", body: body})
	}

	resp := post(`{` + kindES + `,"metadata":{"name":"web","labels":{"keep":"true"}},"spec":{"sourceIPBy":"LoadBalancerIP"}}`)
	if resp.code != http.StatusCreated {
		t.Fatalf("POST: %d %v; want 201", resp.code, resp.err)
	}
	es := object(t, resp.body)
	if es.UID == "" || es.Generation != 1 || es.CreationTimestamp.IsZero() || es.Spec.SourceIPBy != egressv1.LoadBalancerIP {
		t.Errorf("POST returned %+v; want a stored object with uid, generation 1 and the spec", es)
	}
	if resp := post(`{` + kindES + `,"metadata":{"name":"web"}}`); !apierrors.IsAlreadyExists(resp.err) {
		t.Errorf("POST of an existing name: %d %v; want 409 AlreadyExists", resp.code, resp.err)
	}
	resp = post(`{` + kindES + `,"metadata":{"generateName":"gen-"},"spec":{"sourceIPBy":"Network"}}`)
	if generated := object(t, resp.body).Name; resp.code != http.StatusCreated || !strings.HasPrefix(generated, "gen-") {
		t.Errorf("POST with generateName: %d %q; want 201 and a name starting gen-", resp.code, generated)
	}
	create(t, elsewhere, "web", egressv1.EgressServiceSpec{})

	resp = do(t, admin(), request{method: http.MethodGet, path: collectionPath(ns)})
	var list egressv1.EgressServiceList
	if err := json.Unmarshal(resp.body, &list); err != nil || resp.code != http.StatusOK {
		t.Fatalf("GET list: %d %v %v; want 200", resp.code, resp.err, err)
	}
	if len(list.Items) != 2 || list.ResourceVersion == "" {
		t.Errorf("GET list: %d items, resourceVersion %q; want the 2 of this namespace and a resourceVersion", len(list.Items), list.ResourceVersion)
	}
	if got := names(t, ns, metav1.ListOptions{LabelSelector: "keep=true"}); !slices.Equal(got, []string{"web"}) {
		t.Errorf("list keep=true: %v; want [web]", got)
	}

	resp = do(t, admin(), request{method: http.MethodDelete, path: collectionPath(ns), params: map[string]string{"labelSelector": "keep!=true"}})
	if resp.code != http.StatusOK {
		t.Fatalf("DELETE collection keep!=true: %d %v; want 200", resp.code, resp.err)
	}
	if got := names(t, ns, metav1.ListOptions{}); !slices.Equal(got, []string{"web"}) {
		t.Errorf("after DELETE collection keep!=true: %v; want [web]", got)
	}
	if resp := do(t, admin(), request{method: http.MethodDelete, path: collectionPath(ns)}); resp.code != http.StatusOK {
		t.Fatalf("DELETE collection: %d %v; want 200", resp.code, resp.err)
	}
	if got := names(t, ns, metav1.ListOptions{}); len(got) != 0 {
		t.Errorf("after DELETE collection: %v; want none", got)
	}
	if got := names(t, elsewhere, metav1.ListOptions{}); !slices.Equal(got, []string{"web"}) {
		t.Errorf("other namespace after DELETE collection: %v; want [web] untouched", got)
	}
}

// GET, PUT, PATCH (merge, JSON and server-side apply) and DELETE of
// /apis/k8s.ovn.org/v1/namespaces/{namespace}/egressservices/{name}.
func TestObject(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	path := collectionPath(ns, "web")
	orig := create(t, ns, "web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP,
		NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}}})

	resp := do(t, admin(), request{method: http.MethodGet, path: path})
	if got := object(t, resp.body); resp.code != http.StatusOK || got.UID != orig.UID || got.Spec.NodeSelector.MatchLabels["egress"] != "yes" {
		t.Errorf("GET: %d %+v; want 200 and the stored object", resp.code, got)
	}
	if resp := do(t, admin(), request{method: http.MethodGet, path: collectionPath(ns, "missing")}); !apierrors.IsNotFound(resp.err) {
		t.Errorf("GET missing: %d %v; want 404 NotFound", resp.code, resp.err)
	}

	// PUT replaces the spec and bumps the generation; a stale resourceVersion conflicts.
	put := orig.DeepCopy()
	put.APIVersion, put.Kind = "k8s.ovn.org/v1", "EgressService"
	put.Spec = egressv1.EgressServiceSpec{SourceIPBy: egressv1.Network, Network: "blue"}
	body, _ := json.Marshal(put)
	resp = do(t, admin(), request{method: http.MethodPut, path: path, contentType: "application/json", body: string(body)})
	if got := object(t, resp.body); resp.code != http.StatusOK || got.Generation != 2 ||
		got.Spec.SourceIPBy != egressv1.Network || got.Spec.Network != "blue" || len(got.Spec.NodeSelector.MatchLabels) != 0 {
		t.Errorf("PUT: %d %+v; want 200, generation 2 and the new spec only", resp.code, got.Spec)
	}
	if resp := do(t, admin(), request{method: http.MethodPut, path: path, contentType: "application/json", body: string(body)}); !apierrors.IsConflict(resp.err) {
		t.Errorf("PUT with a stale resourceVersion: %d %v; want 409 Conflict", resp.code, resp.err)
	}

	patches := []struct {
		name, contentType, body string
		params                  map[string]string
		want                    egressv1.EgressServiceSpec
	}{
		{"merge", mergeCT, `{"spec":{"network":"red","nodeSelector":{"matchLabels":{"zone":"a"}}}}`, nil,
			egressv1.EgressServiceSpec{SourceIPBy: egressv1.Network, Network: "red", NodeSelector: matchLabels("zone", "a")}},
		{"merge null removes", mergeCT, `{"spec":{"network":null}}`, nil,
			egressv1.EgressServiceSpec{SourceIPBy: egressv1.Network, NodeSelector: matchLabels("zone", "a")}},
		{"json", jsonCT, `[{"op":"test","path":"/spec/sourceIPBy","value":"Network"},
			{"op":"replace","path":"/spec/sourceIPBy","value":"LoadBalancerIP"},
			{"op":"add","path":"/spec/nodeSelector/matchExpressions","value":[{"key":"zone","operator":"Exists"}]}]`, nil,
			egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP, NodeSelector: metav1.LabelSelector{
				MatchLabels:      map[string]string{"zone": "a"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpExists}}}}},
		// nodeSelector is atomic: the applier's selector replaces the whole map.
		{"apply", applyCT, `{` + kindES + `,"metadata":{"name":"web"},"spec":{"nodeSelector":{"matchLabels":{"rack":"r1"}}}}`,
			map[string]string{"fieldManager": "alice", "force": "true"},
			egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP, NodeSelector: matchLabels("rack", "r1")}},
	}
	for _, p := range patches {
		resp := do(t, admin(), request{method: http.MethodPatch, path: path, contentType: p.contentType, body: p.body, params: p.params})
		if resp.code != http.StatusOK {
			t.Fatalf("PATCH %s: %d %v; want 200", p.name, resp.code, resp.err)
		}
		if got := get(t, ns, "web").Spec; !equalSpec(got, p.want) {
			t.Errorf("after PATCH %s: spec %+v; want %+v", p.name, got, p.want)
		}
	}

	failing := []struct {
		name, contentType, body string
		params                  map[string]string
		code                    int
		msg                     string
	}{
		{"json test op fails", jsonCT, `[{"op":"test","path":"/spec/sourceIPBy","value":"Network"},{"op":"remove","path":"/spec/nodeSelector"}]`,
			nil, http.StatusUnprocessableEntity, "the server rejected our request due to an error in our request"},
		// Custom resources have no strategic merge patch.
		{"strategic merge", "application/strategic-merge-patch+json", `{"spec":{"network":"x"}}`,
			nil, http.StatusUnsupportedMediaType, "accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"},
		{"apply conflict", applyCT, `{` + kindES + `,"metadata":{"name":"web"},"spec":{"nodeSelector":{"matchLabels":{"rack":"r2"}}}}`,
			map[string]string{"fieldManager": "bob"}, http.StatusConflict, `conflict with "alice": .spec.nodeSelector`},
		{"apply without fieldManager", applyCT, `{` + kindES + `,"metadata":{"name":"web"}}`,
			nil, http.StatusUnprocessableEntity, "fieldManager: Required value: is required for apply patch"},
	}
	before := get(t, ns, "web")
	for _, p := range failing {
		resp := do(t, admin(), request{method: http.MethodPatch, path: path, contentType: p.contentType, body: p.body, params: p.params})
		if resp.code != p.code || resp.err == nil || !strings.Contains(resp.err.Error(), p.msg) {
			t.Errorf("PATCH %s: %d %v; want %d with %q", p.name, resp.code, resp.err, p.code, p.msg)
		}
	}
	if after := get(t, ns, "web"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("failed PATCHes changed the object: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}

	// DELETE with a wrong uid precondition conflicts; then it deletes.
	resp = do(t, admin(), request{method: http.MethodDelete, path: path, contentType: "application/json",
		body: `{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}`})
	if !apierrors.IsConflict(resp.err) {
		t.Errorf("DELETE with a wrong uid precondition: %d %v; want 409 Conflict", resp.code, resp.err)
	}
	if resp := do(t, admin(), request{method: http.MethodDelete, path: path}); resp.code != http.StatusOK {
		t.Errorf("DELETE: %d %v; want 200", resp.code, resp.err)
	}
	if resp := do(t, admin(), request{method: http.MethodGet, path: path}); !apierrors.IsNotFound(resp.err) {
		t.Errorf("GET after DELETE: %d %v; want 404", resp.code, resp.err)
	}
	if resp := do(t, admin(), request{method: http.MethodDelete, path: path}); !apierrors.IsNotFound(resp.err) {
		t.Errorf("DELETE again: %d %v; want 404", resp.code, resp.err)
	}
}

func matchLabels(k, v string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
}

func equalSpec(a, b egressv1.EgressServiceSpec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
