package conformance

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"testing"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// fieldValidation=Strict|Warn|Ignore (and the default, Warn) on POST, PUT
// and PATCH, with one unknown field (spec.foo) and one duplicate field
// (spec.network: "first", then "last") in the raw body.
func TestFieldValidation(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	const (
		unknown   = `unknown field "spec.foo"`
		duplicate = `duplicate field "spec.network"`
	)
	spec := `{"sourceIPBy":"Network","foo":1,"network":"first","network":"last"}`
	objBody := func(name, resourceVersion string) string {
		return `{` + kindES + `,"metadata":{"name":"` + name + `","resourceVersion":"` + resourceVersion + `"},"spec":` + spec + `}`
	}
	type method struct {
		name string
		// req builds the request for the object name, which exists already
		// unless the method is POST.
		req func(name string) request
		// strictCode is the answer to Strict. A PATCH is applied before it
		// is checked, so its answer is 422 Invalid rather than 400.
		strictCode int
	}
	methods := []method{
		{"POST", func(name string) request {
			return request{method: http.MethodPost, path: collectionPath(ns), contentType: "application/json", body: objBody(name, "")}
		}, http.StatusBadRequest},
		{"PUT", func(name string) request {
			rv := get(t, ns, name).ResourceVersion // custom resources need one to update
			return request{method: http.MethodPut, path: collectionPath(ns, name), contentType: "application/json", body: objBody(name, rv)}
		}, http.StatusBadRequest},
		{"PATCH", func(name string) request {
			return request{method: http.MethodPatch, path: collectionPath(ns, name), contentType: mergeCT, body: `{"spec":` + spec + `}`}
		}, http.StatusUnprocessableEntity},
	}
	for _, m := range methods {
		for _, mode := range []string{"Strict", "Warn", "Ignore", ""} {
			name := strings.ToLower(m.name + "-" + cmp.Or(mode, "default"))
			if m.name != "POST" {
				create(t, ns, name, egressv1.EgressServiceSpec{})
			}
			req := m.req(name)
			if mode != "" {
				req.params = map[string]string{"fieldValidation": mode}
			}
			var w warnings
			resp := do(t, warningClient(t, &w), req)
			got := w.take()
			label := m.name + " fieldValidation=" + mode
			if mode == "Strict" {
				msg := ""
				if resp.err != nil {
					msg = resp.err.Error()
				}
				if resp.code != m.strictCode || !strings.Contains(msg, unknown) || !strings.Contains(msg, duplicate) {
					t.Errorf("%s: %d %q; want %d naming %s and %s", label, resp.code, msg, m.strictCode, unknown, duplicate)
				}
				continue
			}
			if resp.code >= 300 {
				t.Errorf("%s: %d %v; want success", label, resp.code, resp.err)
				continue
			}
			want := []string{duplicate, unknown}
			if mode == "Ignore" {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: warnings %q; want %q", label, got, want)
			}
			// The last duplicate wins and the unknown field is dropped.
			if stored := object(t, resp.body); stored.Spec.Network != "last" || strings.Contains(string(resp.body), `"foo"`) {
				t.Errorf("%s: stored spec %+v; want network \"last\" and no foo", label, stored.Spec)
			}
		}
	}
}

// Server-side apply bodies are YAML: a duplicate key follows
// fieldValidation, while a field the schema does not declare is refused in
// every mode (with a 500 from this apiserver).
func TestFieldValidationApply(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	create(t, ns, "web", egressv1.EgressServiceSpec{})
	const dup = `line 1: key "network" already set in map`
	for _, tc := range []struct {
		mode, body string
		code       int
		warnings   []string
		msg        string
	}{
		{"Strict", `"network":"first","network":"last"`, http.StatusBadRequest, nil, dup},
		{"Warn", `"network":"first","network":"last"`, http.StatusOK, []string{dup}, ""},
		{"Ignore", `"network":"first","network":"last"`, http.StatusOK, nil, ""},
		{"Strict", `"foo":1`, http.StatusInternalServerError, nil, ".spec.foo: field not declared in schema"},
		{"Warn", `"foo":1`, http.StatusInternalServerError, nil, ".spec.foo: field not declared in schema"},
		{"Ignore", `"foo":1`, http.StatusInternalServerError, nil, ".spec.foo: field not declared in schema"},
	} {
		var w warnings
		resp := do(t, warningClient(t, &w), request{method: http.MethodPatch, path: collectionPath(ns, "web"), contentType: applyCT,
			params: map[string]string{"fieldManager": "applier", "fieldValidation": tc.mode},
			body:   `{` + kindES + `,"metadata":{"name":"web"},"spec":{` + tc.body + `}}`})
		label := "apply " + tc.body + " fieldValidation=" + tc.mode
		got := w.take()
		msg := ""
		if resp.err != nil {
			msg = resp.err.Error()
		}
		if resp.code != tc.code || !slices.Equal(got, tc.warnings) || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %q warnings %q; want %d %q warnings %q", label, resp.code, msg, got, tc.code, tc.msg, tc.warnings)
		}
		if tc.code == http.StatusOK && get(t, ns, "web").Spec.Network != "last" {
			t.Errorf("%s: network %q; want the last duplicate", label, get(t, ns, "web").Spec.Network)
		}
	}
}
