package selection_test

import (
	"context"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
)

// TestStartupRepair is upstream's repair cases (§4.2 1, 2) against the API
// server: before the controller starts, one service has a valid host
// (adopted: not rewritten), one a host that no longer exists (moved), one
// has no Service (cleared), a Network one no host (→ ALL), and nodes carry
// labels of deleted and Network services (removed).
func TestStartupRepair(t *testing.T) {
	e := newEnv(t)
	kube.CreateLoadBalancer(t, e.ns, "svc1", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, e.ns, "svc1", "node2")
	kube.CreateLoadBalancer(t, e.ns, "svc2", []string{"172.18.0.101"}, "10.244.1.6@node1")
	kube.SetHost(t, e.ns, "svc2", "ghost")
	kube.SetHost(t, e.ns, "nosvc", "node1")
	kube.CreateLoadBalancer(t, e.ns, "net", []string{"172.18.0.102"}, "10.244.1.7@node1")
	kube.SetHost(t, e.ns, "net", "", func(es *egressv1.EgressService) { es.Spec.SourceIPBy = egressv1.Network })
	patchLabels(t, "node1", map[string]*string{e.label("deleted"): ptr(""), e.label("nosvc"): ptr("")})
	patchLabels(t, "node3", map[string]*string{e.label("net"): ptr(""), e.label("svc1"): ptr("")})
	rv := e.egressService("svc1").ResourceVersion

	c, _ := e.start(selection.Config{}, kube.Config)
	e.waitHost("svc2", "node1")
	e.waitHost("nosvc", "")
	e.waitHost("net", egressv1.HostAll)
	e.waitLabels(map[string][]string{"node1": {e.label("svc2")}, "node2": {e.label("svc1")}})
	e.settle(c)
	if got := e.egressService("svc1"); got.Status.Host != "node2" || got.ResourceVersion != rv {
		t.Errorf("svc1 not adopted as is: host %q, resourceVersion %s → %s", got.Status.Host, rv, got.ResourceVersion)
	}
	e.waitEvent("svc2", hosts.ReasonHostChanged, "from ghost to node1: node ghost no longer exists")
	e.waitEvent("net", hosts.ReasonHostAssigned, "ALL")
	if st := c.Stats(); st.StatusWrites != 3 {
		t.Errorf("status writes: %d; want 3 (svc2, nosvc, net)", st.StatusWrites)
	}
}

// conflictOnce makes the first status update of an EgressService fail with
// a real conflict: just before forwarding it, it changes the object through
// another client, so the API server sees a stale resourceVersion.
type conflictOnce struct {
	bump    func()
	done    atomic.Bool
	mu      sync.Mutex
	results []int
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *conflictOnce) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) { return c.roundTrip(next, r) })
}

func (c *conflictOnce) roundTrip(next http.RoundTripper, r *http.Request) (*http.Response, error) {
	isStatus := r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/egressservices/") && strings.HasSuffix(r.URL.Path, "/status")
	if isStatus && c.done.CompareAndSwap(false, true) {
		c.bump()
	}
	resp, err := next.RoundTrip(r)
	if isStatus && err == nil {
		c.mu.Lock()
		c.results = append(c.results, resp.StatusCode)
		c.mu.Unlock()
	}
	return resp, err
}

// TestConflictRetried provokes a conflict on the status write: the write is
// retried after re-reading the object from the API server, and succeeds.
func TestConflictRetried(t *testing.T) {
	e := newEnv(t)
	kube.CreateLoadBalancer(t, e.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	e.createES("web")
	co := &conflictOnce{bump: func() {
		patch := []byte(`{"metadata":{"annotations":{"bumped":"yes"}}}`)
		if _, err := kube.Egress.K8sV1().EgressServices(e.ns).Patch(context.Background(), "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("bump: %v", err)
		}
	}}
	rc := rest.CopyConfig(kube.Config)
	rc.WrapTransport = co.wrap
	c, _ := e.start(selection.Config{}, rc)
	e.waitHost("web", "node1")
	e.settle(c)
	co.mu.Lock()
	results := co.results
	co.mu.Unlock()
	if len(results) != 2 || results[0] != http.StatusConflict || results[1] != http.StatusOK {
		t.Fatalf("status writes answered %v; want a conflict, then OK", results)
	}
	if st := c.Stats(); st.Conflicts != 1 || st.StatusWrites != 1 || st.Errors != 0 {
		t.Fatalf("stats %+v; want one conflict, one write, no error", st)
	}
	if e.egressService("web").Annotations["bumped"] != "yes" {
		t.Fatal("the retry overwrote the concurrent change")
	}
}
