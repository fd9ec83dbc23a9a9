package conformance

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

// GET, PUT and PATCH of .../egressservices/{name}/status: status changes only
// through /status, spec changes sent to /status are ignored, and status
// changes sent to the main resource are ignored.
func TestStatusSubresource(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	create(t, ns, "web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP})
	main, status := collectionPath(ns, "web"), collectionPath(ns, "web", "status")

	resp := do(t, admin(), request{method: http.MethodGet, path: status})
	if got := object(t, resp.body); resp.code != http.StatusOK || got.Name != "web" || got.Spec.SourceIPBy != egressv1.LoadBalancerIP {
		t.Fatalf("GET /status: %d %+v; want 200 and the whole object", resp.code, got)
	}

	// put sends the stored object with f applied, as JSON, to path.
	put := func(path string, f func(*egressv1.EgressService)) request {
		es := get(t, ns, "web")
		es.APIVersion, es.Kind = "k8s.ovn.org/v1", "EgressService"
		f(es)
		b, _ := json.Marshal(es)
		return request{method: http.MethodPut, path: path, contentType: "application/json", body: string(b)}
	}
	for _, step := range []struct {
		name        string
		req         func() request
		wantHost    string
		wantSource  egressv1.SourceIPMode
		wantNetwork string
		wantGen     int64
	}{
		{"PUT /status changes status, not spec", func() request {
			return put(status, func(es *egressv1.EgressService) { es.Status.Host = "node-1"; es.Spec.SourceIPBy = egressv1.Network })
		}, "node-1", egressv1.LoadBalancerIP, "", 1},
		{"merge PATCH /status changes status, not spec", func() request {
			return request{method: http.MethodPatch, path: status, contentType: mergeCT,
				body: `{"status":{"host":"node-2"},"spec":{"network":"blue"}}`}
		}, "node-2", egressv1.LoadBalancerIP, "", 1},
		{"JSON PATCH /status", func() request {
			return request{method: http.MethodPatch, path: status, contentType: jsonCT,
				body: `[{"op":"replace","path":"/status/host","value":"node-3"}]`}
		}, "node-3", egressv1.LoadBalancerIP, "", 1},
		{"apply PATCH /status", func() request {
			return request{method: http.MethodPatch, path: status, contentType: applyCT,
				params: map[string]string{"fieldManager": "ovn-egress-controller", "force": "true"},
				body:   `{` + kindES + `,"metadata":{"name":"web"},"status":{"host":"node-4"}}`}
		}, "node-4", egressv1.LoadBalancerIP, "", 1},
		{"PUT main resource changes spec, not status", func() request {
			return put(main, func(es *egressv1.EgressService) { es.Status.Host = "evil"; es.Spec.Network = "red" })
		}, "node-4", egressv1.LoadBalancerIP, "red", 2},
		{"merge PATCH main resource ignores status", func() request {
			return request{method: http.MethodPatch, path: main, contentType: mergeCT, body: `{"status":{"host":"evil"}}`}
		}, "node-4", egressv1.LoadBalancerIP, "red", 2},
		{"apply PATCH main resource ignores status", func() request {
			return request{method: http.MethodPatch, path: main, contentType: applyCT,
				params: map[string]string{"fieldManager": "intruder"},
				body:   `{` + kindES + `,"metadata":{"name":"web"},"status":{"host":"evil"}}`}
		}, "node-4", egressv1.LoadBalancerIP, "red", 2},
	} {
		resp := do(t, admin(), step.req())
		if resp.code != http.StatusOK {
			t.Fatalf("%s: %d %v; want 200", step.name, resp.code, resp.err)
		}
		got := get(t, ns, "web")
		if got.Status.Host != step.wantHost || got.Spec.SourceIPBy != step.wantSource ||
			got.Spec.Network != step.wantNetwork || got.Generation != step.wantGen {
			t.Errorf("%s: host %q sourceIPBy %q network %q generation %d; want %q %q %q %d", step.name,
				got.Status.Host, got.Spec.SourceIPBy, got.Spec.Network, got.Generation,
				step.wantHost, step.wantSource, step.wantNetwork, step.wantGen)
		}
	}

	// status.host is required once a status is written.
	resp = do(t, admin(), request{method: http.MethodPatch, path: status, contentType: jsonCT,
		body: `[{"op":"remove","path":"/status/host"}]`})
	if !apierrors.IsInvalid(resp.err) || !strings.Contains(resp.err.Error(), "status.host: Required value") {
		t.Errorf("removing status.host: %d %v; want 422 status.host: Required value", resp.code, resp.err)
	}
	if resp := do(t, admin(), request{method: http.MethodGet, path: collectionPath(ns, "missing", "status")}); !apierrors.IsNotFound(resp.err) {
		t.Errorf("GET /status of a missing object: %d %v; want 404", resp.code, resp.err)
	}
}

// TestStatusAsOVNKubeWritesIt: ovn-kubernetes' cluster-manager writes
// status.host with a Get and an Update of /status, its user agent
// "<host name>/ovnkube@<commit> …" (its pkg/util/kube.go): the write lands
// unchanged under ovn-egress's CRD, and the API server records the part of
// the user agent before the first "/" — the host's name, not "ovnkube" —
// as its field manager. That is why ovn-egress treats any status.host
// writer that is not its own as foreign (pkg/k8s/coexist).
func TestStatusAsOVNKubeWritesIt(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	create(t, ns, "web", egressv1.EgressServiceSpec{})
	cfg := rest.CopyConfig(kube.Config)
	cfg.UserAgent = "control-plane-1/ovnkube@8871cd9c (linux/amd64) kubernetes/v0.0.0"
	ovnk, err := egressclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	es, err := ovnk.K8sV1().EgressServices(ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Status.Host = "node-2"
	if _, err := ovnk.K8sV1().EgressServices(ns).UpdateStatus(t.Context(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("ovnkube's status update: %v", err)
	}
	got := get(t, ns, "web")
	if got.Status.Host != "node-2" {
		t.Errorf("status.host %q after ovnkube's update; want node-2", got.Status.Host)
	}
	var managers []string
	for _, e := range got.ManagedFields {
		if e.Subresource == "status" {
			managers = append(managers, e.Manager)
		}
	}
	if len(managers) != 1 || managers[0] != "control-plane-1" {
		t.Errorf("status managers %v; want [control-plane-1] (the user agent's part before the first /)", managers)
	}
}
