package main

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// apiEnv is the real kube-apiserver (and etcd) of `make testbin`, holding
// the world's objects; started once per run, shared by the scenarios that
// are about the API server.
type apiEnv struct {
	kube   *testenv.Kube
	cfg    *rest.Config // the bench's client settings (QPS as -kube-qps)
	client kubernetes.Interface
	egress egressclient.Interface
	// populate is how long creating the objects took.
	populate time.Duration
	writes   int
}

// writers is the parallelism of every bulk write, the bench's and the
// master's alike (host selection's default --writers).
const writers = 16

// clientConfig copies the API server's admin config with the bench's QPS;
// count, when set, counts the requests by "METHOD kind[/subresource]".
func (a *apiEnv) clientConfig(qps float64, count *requestCounter) *rest.Config {
	c := rest.CopyConfig(a.kube.Config)
	c.QPS = float32(qps)
	c.Burst = 1000
	if qps > 0 {
		c.Burst = int(2 * qps)
	}
	if count != nil {
		c.WrapTransport = count.wrap
	}
	return c
}

func (b *bench) apiServer(ctx context.Context) (*apiEnv, error) {
	if b.api != nil {
		return b.api, nil
	}
	b.step("starting kube-apiserver and etcd")
	k, err := testenv.StartKube(filepath.Join(b.tmp, "kube"))
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	a := &apiEnv{kube: k}
	a.cfg = a.clientConfig(b.opts.kubeQPS, nil)
	if a.client, err = kubernetes.NewForConfig(a.clientConfig(-1, nil)); err == nil {
		a.egress, err = egressclient.NewForConfig(a.clientConfig(-1, nil))
	}
	if err != nil {
		k.Stop()
		return nil, fmt.Errorf("clients: %w", err)
	}
	b.api = a
	b.step("creating the objects in the API server")
	start := time.Now()
	if err := a.create(ctx, b.w.objects(false)); err != nil {
		return nil, fmt.Errorf("create the objects: %w", err)
	}
	a.populate = time.Since(start)
	return a, nil
}

func (a *apiEnv) stop() { a.kube.Stop() }

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// create writes the objects as the cluster's own controllers would:
// namespaces, Ready nodes with the ovn-kubernetes annotations, Services
// with their load-balancer status, EndpointSlices, EgressServices.
func (a *apiEnv) create(ctx context.Context, o objects) error {
	c := a.client
	co := metav1.CreateOptions{}
	for i := 0; i < namespaces; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d", i)}}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, co); err != nil {
			return fmt.Errorf("namespace: %w", err)
		}
	}
	err := parallel(ctx, len(o.nodes), writers, func(ctx context.Context, i int) error {
		n, err := c.CoreV1().Nodes().Create(ctx, o.nodes[i].DeepCopy(), co)
		if err == nil {
			n.Status = o.nodes[i].Status
			_, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		}
		return wrap("node "+o.nodes[i].Name, err)
	})
	if err == nil {
		err = parallel(ctx, len(o.svcs), writers, func(ctx context.Context, i int) error {
			want := o.svcs[i]
			s, err := c.CoreV1().Services(want.Namespace).Create(ctx, want.DeepCopy(), co)
			if err == nil {
				s.Status = want.Status
				_, err = c.CoreV1().Services(want.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{})
			}
			return wrap("service "+want.Name, err)
		})
	}
	if err == nil {
		err = parallel(ctx, len(o.slices), writers, func(ctx context.Context, i int) error {
			_, err := c.DiscoveryV1().EndpointSlices(o.slices[i].Namespace).Create(ctx, o.slices[i].DeepCopy(), co)
			return wrap("endpointslice "+o.slices[i].Name, err)
		})
	}
	if err == nil {
		err = parallel(ctx, len(o.ess), writers, func(ctx context.Context, i int) error {
			_, err := a.egress.K8sV1().EgressServices(o.ess[i].Namespace).Create(ctx, o.ess[i].DeepCopy(), co)
			return wrap("egressservice "+o.ess[i].Name, err)
		})
	}
	a.writes = namespaces + 2*len(o.nodes) + 2*len(o.svcs) + len(o.slices) + len(o.ess)
	return err
}

// listEgressServices lists every EgressService.
func (a *apiEnv) listEgressServices(ctx context.Context, c egressclient.Interface) ([]egressv1.EgressService, error) {
	l, err := c.K8sV1().EgressServices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list egressservices: %w", err)
	}
	return l.Items, nil
}

// writeHosts is the bare client: it lists the EgressServices once and writes
// every status.host that differs from hosts (by "namespace/name") through
// the status subresource, writers at a time. It returns the writes made and
// the time they took after the list.
func (a *apiEnv) writeHosts(ctx context.Context, c egressclient.Interface, hosts map[string]string) (int, time.Duration, error) {
	items, err := a.listEgressServices(ctx, c)
	if err != nil {
		return 0, 0, err
	}
	var todo []*egressv1.EgressService
	for i := range items {
		es := &items[i]
		if h := hosts[es.Namespace+"/"+es.Name]; es.Status.Host != h {
			es.Status.Host = h
			todo = append(todo, es)
		}
	}
	start := time.Now()
	err = parallel(ctx, len(todo), writers, func(ctx context.Context, i int) error {
		_, err := c.K8sV1().EgressServices(todo[i].Namespace).UpdateStatus(ctx, todo[i], metav1.UpdateOptions{})
		return wrap("status of "+todo[i].Name, err)
	})
	return len(todo), time.Since(start), err
}

// hosts reads every EgressService's status.host.
func (a *apiEnv) hosts(ctx context.Context) (map[string]string, error) {
	items, err := a.listEgressServices(ctx, a.egress)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(items))
	for _, es := range items {
		out[es.Namespace+"/"+es.Name] = es.Status.Host
	}
	return out, nil
}

// hostedCluster is the API server with every EgressService hosted (the
// world's layout, unless all already have a host, as host selection would
// have left them) and a snapshot of the objects the master reads.
func (b *bench) hostedCluster(ctx context.Context) (*apiEnv, objects, error) {
	a, err := b.apiServer(ctx)
	if err != nil {
		return nil, objects{}, err
	}
	cur, err := a.hosts(ctx)
	if err != nil {
		return nil, objects{}, err
	}
	for _, h := range cur {
		if h == "" {
			want := map[string]string{}
			for s := 0; s < b.w.size.Services; s++ {
				want[b.w.key(s)] = b.w.nodeName(b.w.host(s))
			}
			if _, _, err := a.writeHosts(ctx, a.egress, want); err != nil {
				return nil, objects{}, err
			}
			break
		}
	}
	objs, err := a.snapshot(ctx)
	return a, objs, err
}

// snapshot lists every object the master reads from the API server.
func (a *apiEnv) snapshot(ctx context.Context) (objects, error) {
	var o objects
	nodes, err := a.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("list nodes: %w", err)
	}
	svcs, err := a.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("list services: %w", err)
	}
	slices, err := a.client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("list endpointslices: %w", err)
	}
	ess, err := a.listEgressServices(ctx, a.egress)
	if err != nil {
		return o, err
	}
	for i := range nodes.Items {
		o.nodes = append(o.nodes, &nodes.Items[i])
	}
	for i := range svcs.Items {
		if svcs.Items[i].Spec.Type == corev1.ServiceTypeLoadBalancer {
			o.svcs = append(o.svcs, &svcs.Items[i])
		}
	}
	for i := range slices.Items {
		if slices.Items[i].Labels[discoveryv1.LabelServiceName] != "" {
			o.slices = append(o.slices, &slices.Items[i])
		}
	}
	for i := range ess {
		o.ess = append(o.ess, &ess[i])
	}
	return o, nil
}

// writeReports plays the node agents: each node's readiness report says it
// programmed every service it hosts, computed by translate.NodePlan as
// the agent computes it.
func (a *apiEnv) writeReports(ctx context.Context, o objects, clusterSubnets []netip.Prefix) error {
	if err := a.reportNamespace(ctx); err != nil {
		return err
	}
	return parallel(ctx, len(o.nodes), writers, func(ctx context.Context, i int) error {
		name := o.nodes[i].Name
		plan := nodeplan.NodePlan(nodeplan.NodePlanInput{Node: name, EgressServices: o.ess, Services: o.svcs,
			EndpointSlices: o.slices, ClusterSubnets: clusterSubnets, Config: nodeplan.DefaultNodePlanConfig()})
		cmName, err := translate.ReportConfigMapName(name)
		if err == nil {
			// One ConfigMap: a bench node hosts N/K services, far below
			// the 128 KiB at which an agent starts a second one.
			_, err = a.client.CoreV1().ConfigMaps(master.DefaultReportNamespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: master.DefaultReportNamespace,
					Labels: map[string]string{translate.ReportLabel: "", translate.ReportNodeLabel: translate.ReportNodeHash(name)}},
				Data: map[string]string{translate.ReportNodeKey: name, translate.ReportDataKey: plan.Report().Encode()}}, metav1.CreateOptions{})
		}
		return wrap("report of "+name, err)
	})
}

// reportNamespace creates the namespace the reports live in.
func (a *apiEnv) reportNamespace(ctx context.Context) error {
	_, err := a.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: master.DefaultReportNamespace}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return wrap("report namespace", err)
}

// requestCounter counts a client's requests by "METHOD resource[/sub]".
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func newRequestCounter() *requestCounter { return &requestCounter{n: map[string]int{}} }

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.n[r.Method+" "+resourceOf(r.URL.Path)]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *requestCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// resourceOf reduces a request path to its resource (and subresource):
// /apis/k8s.ovn.org/v1/namespaces/ns/egressservices/x/status → egressservices/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i < len(parts); i++ {
		if parts[i] == "namespaces" && i+2 < len(parts) {
			parts = parts[i+2:]
			break
		}
	}
	switch {
	case len(parts) >= 3 && (parts[0] == "api" || parts[0] == "apis"):
		// cluster-scoped: /api/v1/nodes/x or /apis/g/v/kind/x
		if parts[0] == "api" {
			parts = parts[2:]
		} else {
			parts = parts[3:]
		}
	}
	if len(parts) >= 3 {
		return parts[0] + "/" + parts[2]
	}
	if len(parts) >= 1 {
		return parts[0]
	}
	return path
}

// testbinDir is where `make testbin` put kube-apiserver (TESTBIN_DIR, else
// bin/testbin under the repository root).
func testbinDir() string {
	if d := os.Getenv("TESTBIN_DIR"); d != "" {
		return d
	}
	if root, err := repoRoot(); err == nil {
		return filepath.Join(root, "bin", "testbin")
	}
	return ""
}

func (b *bench) kubeAPIServer() string {
	if b.api == nil {
		return ""
	}
	return filepath.Join(testbinDir(), "kube-apiserver")
}

// repoRoot is the directory of this module's go.mod above the working
// directory.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/ovn-egress/ovn-egress\n") {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod of github.com/ovn-egress/ovn-egress above %s", wd)
		}
	}
}
