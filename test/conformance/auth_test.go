package conformance

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// Every endpoint of the API reference answers 401 Unauthorized to a request
// without credentials, or with a token the server does not know, and
// changes nothing.
func TestUnauthorized(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	create(t, ns, "web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP})

	// A plain HTTPS client that trusts the server's CA and sends no token.
	hc, err := rest.HTTPClientFor(rest.AnonymousClientConfig(kube.Config))
	if err != nil {
		t.Fatal(err)
	}
	obj := `{` + kindES + `,"metadata":{"name":"web"},"spec":{"sourceIPBy":"Network"}}`
	endpoints := []struct{ method, path, contentType, body string }{
		{http.MethodGet, group + "/egressservices", "", ""},
		{http.MethodGet, collectionPath(ns), "", ""},
		{http.MethodPost, collectionPath(ns), "application/json", strings.Replace(obj, `"web"`, `"new"`, 1)},
		{http.MethodDelete, collectionPath(ns), "", ""},
		{http.MethodGet, collectionPath(ns, "web"), "", ""},
		{http.MethodPut, collectionPath(ns, "web"), "application/json", obj},
		{http.MethodPatch, collectionPath(ns, "web"), mergeCT, `{"spec":{"network":"x"}}`},
		{http.MethodDelete, collectionPath(ns, "web"), "", ""},
		{http.MethodGet, collectionPath(ns, "web", "status"), "", ""},
		{http.MethodPut, collectionPath(ns, "web", "status"), "application/json", obj},
		{http.MethodPatch, collectionPath(ns, "web", "status"), mergeCT, `{"status":{"host":"x"}}`},
	}
	for _, token := range []string{"", "not-a-known-token"} {
		for _, e := range endpoints {
			req, err := http.NewRequestWithContext(t.Context(), e.method, kube.Config.Host+e.path, strings.NewReader(e.body))
			if err != nil {
				t.Fatal(err)
			}
			if e.contentType != "" {
				req.Header.Set("Content-Type", e.contentType)
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var st metav1.Status
			_ = json.Unmarshal(body, &st)
			if resp.StatusCode != http.StatusUnauthorized || st.Reason != metav1.StatusReasonUnauthorized {
				t.Errorf("%s %s with token %q: %d %s; want 401 Unauthorized", e.method, e.path, token, resp.StatusCode, body)
			}
		}
	}
	got := get(t, ns, "web")
	if got.Spec.SourceIPBy != egressv1.LoadBalancerIP || got.Spec.Network != "" || got.Status.Host != "" {
		t.Errorf("after the refused requests: %+v %+v; want the object unchanged", got.Spec, got.Status)
	}
	if n := names(t, ns, metav1.ListOptions{}); len(n) != 1 {
		t.Errorf("objects after the refused requests: %v; want only [web]", n)
	}
}
