package selection_test

import (
	"context"
	"errors"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.RunWithKube(m, "oe-selection-", &kube)) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(testWriter{t})
	l.SetLevel(logrus.DebugLevel)
	return l.WithField("test", t.Name())
}

// env is one test's cluster: three Ready nodes of the default topology
// (node1..node3), a namespace, and a way to run selection controllers.
type env struct {
	t    *testing.T
	ns   string
	topo testenv.Topology
}

func newEnv(t *testing.T) *env {
	topo := testenv.DefaultTopology(3)
	kube.CreateNodes(t, topo)
	ns := kube.Namespace(t)
	// Namespaces never finish deleting here: remove the EgressServices so
	// that later tests do not count them as allocations.
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	return &env{t: t, ns: ns, topo: topo}
}

// start runs a selection controller built from cfg (cluster subnets filled
// in) with clients of rc, until the test ends or stop is called.
func (e *env) start(cfg selection.Config, rc *rest.Config) (*selection.Controller, func()) {
	e.t.Helper()
	cfg.ClusterSubnets = e.topo.ClusterSubnets
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	ec, err := egressclient.NewForConfig(rc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	recorder, stopEvents, err := controller.NewRecorder(ctx, kc, corev1.EventSource{Component: "ovn-egress-test"})
	if err != nil {
		e.t.Fatal(err)
	}
	kubeInf := kubeinformers.NewSharedInformerFactory(kc, 0)
	egInf := egressinformers.NewSharedInformerFactory(ec, 0)
	c, err := selection.New(cfg, testLogger(e.t), kc, ec, kubeInf, egInf, recorder)
	if err != nil {
		e.t.Fatal(err)
	}
	kubeInf.Start(ctx.Done())
	egInf.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("controller: %v", err)
			}
		case <-time.After(20 * time.Second):
			e.t.Errorf("controller did not stop")
		}
		kubeInf.Shutdown()
		egInf.Shutdown()
		stopEvents()
	}
	e.t.Cleanup(stop)
	return c, stop
}

// eventually polls cond for up to 20 s.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settle waits until the controller is idle, then a little longer, and
// checks it stays so (for "nothing happens" assertions).
func (e *env) settle(c *selection.Controller) {
	e.t.Helper()
	e.eventually("controller idle", c.Idle)
	time.Sleep(300 * time.Millisecond)
	e.eventually("controller idle", c.Idle)
}

func (e *env) egressService(name string) *egressv1.EgressService {
	e.t.Helper()
	es, err := kube.Egress.K8sV1().EgressServices(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

func (e *env) host(name string) string { return e.egressService(name).Status.Host }

// waitHost waits until status.host of name is want.
func (e *env) waitHost(name, want string) {
	e.t.Helper()
	var got string
	deadline := time.Now().Add(20 * time.Second)
	for got = e.host(name); got != want; got = e.host(name) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: status.host is %q; want %q", name, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// create creates a LoadBalancer Service with endpoints ("ip@node") and its
// EgressService.
func (e *env) create(name string, ingress []string, eps []string, mutate ...func(*egressv1.EgressService)) {
	e.t.Helper()
	kube.CreateLoadBalancer(e.t, e.ns, name, ingress, eps...)
	e.createES(name, mutate...)
}

// createES creates an EgressService (without writing its status: the
// controller may already be at work).
func (e *env) createES(name string, mutate ...func(*egressv1.EgressService)) {
	e.t.Helper()
	es := testenv.EgressService(e.ns, name, "")
	for _, m := range mutate {
		m(es)
	}
	if _, err := kube.Egress.K8sV1().EgressServices(e.ns).Create(context.Background(), es, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) updateSpec(name string, mutate func(*egressv1.EgressService)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		es := e.egressService(name)
		mutate(es)
		_, err := kube.Egress.K8sV1().EgressServices(e.ns).Update(context.Background(), es, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// nodeLabels returns the egress-service labels of every node of the topology.
func (e *env) nodeLabels() map[string][]string {
	e.t.Helper()
	out := map[string][]string{}
	for _, n := range e.topo.Nodes {
		node, err := kube.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for k := range node.Labels {
			if hosts.IsNodeLabel(k) {
				out[n.Name] = append(out[n.Name], k)
			}
		}
		slices.Sort(out[n.Name])
	}
	return out
}

// waitLabels waits until the egress-service labels are exactly want.
func (e *env) waitLabels(want map[string][]string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := e.nodeLabels()
		if maps.EqualFunc(got, want, slices.Equal[[]string]) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node labels: got %v; want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) label(name string) string { return hosts.NodeLabel(e.ns, name) }

// events returns the Events recorded on EgressService name, oldest first.
func (e *env) events(name string) []corev1.Event {
	e.t.Helper()
	list, err := kube.Client.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	out := list.Items
	slices.SortFunc(out, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return out
}

// waitEvent waits for an Event with reason on name whose message contains
// substr, and returns it.
func (e *env) waitEvent(name string, reason translate.Reason, substr string) corev1.Event {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs := e.events(name)
		for _, ev := range evs {
			if ev.Reason == string(reason) && strings.Contains(ev.Message, substr) && ev.InvolvedObject.Kind == "EgressService" {
				return ev
			}
		}
		if time.Now().After(deadline) {
			var got []string
			for _, ev := range evs {
				got = append(got, ev.Reason+": "+ev.Message)
			}
			e.t.Fatalf("no %s event on %s containing %q; got %q", reason, name, substr, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countEvents counts the Events of reason on name (an aggregated Event
// counts its repetitions).
func (e *env) countEvents(name string, reason translate.Reason) int {
	n := 0
	for _, ev := range e.events(name) {
		if ev.Reason == string(reason) {
			n += max(int(ev.Count), 1)
		}
	}
	return n
}

// fakeProber reports the nodes marked down as unreachable.
type fakeProber struct {
	mu     sync.Mutex
	down   map[string]bool
	probed map[string]int
}

func newFakeProber() *fakeProber {
	return &fakeProber{down: map[string]bool{}, probed: map[string]int{}}
}

func (f *fakeProber) Probe(_ context.Context, node string, _ []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probed[node]++
	if f.down[node] {
		return errors.New("fake: unreachable")
	}
	return nil
}

func (f *fakeProber) set(node string, down bool) {
	f.mu.Lock()
	f.down[node] = down
	f.mu.Unlock()
}

func (f *fakeProber) probes(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probed[node]
}

func withSelector(ml map[string]string) func(*egressv1.EgressService) {
	return func(es *egressv1.EgressService) { es.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: ml} }
}

func onNode(n string) func(*egressv1.EgressService) {
	return withSelector(map[string]string{"kubernetes.io/hostname": n})
}
