// Package conformance proves the EgressService API (k8s.ovn.org/v1), and the
// other Kubernetes objects ovn-egress reads and writes, against a real
// kube-apiserver with the project's CRD installed: every endpoint and query
// parameter of the API reference, the subresources, validation and the
// printer columns. One control plane serves the whole package (TestMain);
// every test works in a namespace of its own, so the tests run in parallel.
package conformance

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

// kube is the package's control plane. TestMain sets it once, before any
// test runs; tests only read it.
var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.RunWithKube(m, "conformance-kube-", &kube)) }

const (
	group   = "/apis/k8s.ovn.org/v1"
	kindES  = `"apiVersion":"k8s.ovn.org/v1","kind":"EgressService"`
	mergeCT = "application/merge-patch+json"
	jsonCT  = "application/json-patch+json"
	applyCT = "application/apply-patch+yaml"
)

// collectionPath is /apis/k8s.ovn.org/v1/namespaces/NS/egressservices, and
// with extra segments the object or its subresource.
func collectionPath(ns string, more ...string) string {
	p := group + "/namespaces/" + ns + "/egressservices"
	for _, s := range more {
		p += "/" + s
	}
	return p
}

// response is what the API server answered to one raw request.
type response struct {
	code int
	body []byte
	err  error // the decoded Status for codes >= 400
}

// request is one raw HTTP request with a body sent byte for byte.
type request struct {
	method, path, contentType, body string
	accept                          string // when not the client's default
	params                          map[string]string
}

// do sends req through c and returns the answer; it fails t only if the
// request could not be sent at all.
func do(t *testing.T, c rest.Interface, req request) response {
	t.Helper()
	r := c.Verb(req.method).AbsPath(req.path)
	for k, v := range req.params {
		r = r.Param(k, v)
	}
	if req.accept != "" {
		r = r.SetHeader("Accept", req.accept)
	}
	if req.body != "" {
		r = r.SetHeader("Content-Type", req.contentType).Body([]byte(req.body))
	}
	var resp response
	res := r.Do(t.Context()).StatusCode(&resp.code)
	resp.body, _ = res.Raw()
	resp.err = res.Error() // decodes the Status of a failure
	if resp.code == 0 {
		t.Fatalf("%s %s: %v", req.method, req.path, resp.err)
	}
	return resp
}

// admin is the REST client of the admin's EgressService clientset.
func admin() rest.Interface { return kube.Egress.K8sV1().RESTClient() }

// object decodes an EgressService from a response body.
func object(t *testing.T, b []byte) *egressv1.EgressService {
	t.Helper()
	es := &egressv1.EgressService{}
	if err := json.Unmarshal(b, es); err != nil {
		t.Fatalf("decode EgressService: %v\n%s", err, b)
	}
	return es
}

// create stores an EgressService through the typed client.
func create(t *testing.T, ns, name string, spec egressv1.EgressServiceSpec, labels ...string) *egressv1.EgressService {
	t.Helper()
	es := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	if len(labels) > 0 {
		es.Labels = map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			es.Labels[labels[i]] = labels[i+1]
		}
	}
	got, err := kube.Egress.K8sV1().EgressServices(ns).Create(t.Context(), es, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s/%s: %v", ns, name, err)
	}
	return got
}

// get reads an EgressService through the typed client.
func get(t *testing.T, ns, name string) *egressv1.EgressService {
	t.Helper()
	es, err := kube.Egress.K8sV1().EgressServices(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s/%s: %v", ns, name, err)
	}
	return es
}

// setHost writes status.host through the /status subresource.
func setHost(t *testing.T, es *egressv1.EgressService, host string) *egressv1.EgressService {
	t.Helper()
	es = es.DeepCopy()
	es.Status.Host = host
	got, err := kube.Egress.K8sV1().EgressServices(es.Namespace).UpdateStatus(t.Context(), es, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status of %s/%s: %v", es.Namespace, es.Name, err)
	}
	return got
}

// names lists the names of the EgressServices in ns, sorted.
func names(t *testing.T, ns string, opts metav1.ListOptions) []string {
	t.Helper()
	list, err := kube.Egress.K8sV1().EgressServices(ns).List(t.Context(), opts)
	if err != nil {
		t.Fatalf("list %q: %v", ns, err)
	}
	var out []string
	for _, es := range list.Items {
		out = append(out, es.Name)
	}
	slices.Sort(out)
	return out
}

// warnings records the Warning headers of the responses of one client.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// take returns the warnings seen so far, sorted, and forgets them.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	slices.Sort(out)
	return out
}

// warningClient is an admin REST client whose warnings land in w.
func warningClient(t *testing.T, w *warnings) rest.Interface {
	t.Helper()
	cfg := rest.CopyConfig(kube.Config)
	cfg.WarningHandlerWithContext = w
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.K8sV1().RESTClient()
}
