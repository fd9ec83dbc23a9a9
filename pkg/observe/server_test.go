package observe_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
)

func quiet() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// TestServerEndpoints: /healthz and /readyz answer 200 "ok" while every
// check passes and 503 naming each failed check otherwise (/readyz also
// before any component registered one: the process is still starting); /metrics serves
// the registry (the component's metrics and the Go runtime's).
func TestServerEndpoints(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := observe.New(observe.Config{Address: "127.0.0.1:0"}, quiet())
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ovn_egress_test_total", Help: "test"})
	s.Registry().MustRegister(c)
	c.Add(3)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		code, body, err := testenv.HTTPGet(ctx, base+path)
		if err != nil {
			t.Fatal(err)
		}
		return code, body
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("/readyz before any component registered a check: %d %q, want 503 starting", code, body)
	}
	var nbDown, cachesCold bool
	s.Ready("nb", func() error {
		if nbDown {
			return errors.New("NB not connected")
		}
		return nil
	})
	s.Ready("caches", func() error {
		if cachesCold {
			return errors.New("not synced")
		}
		return nil
	})
	s.Live("worker", func() error { return nil })
	nbDown, cachesCold = true, true
	code, body := get("/readyz")
	if code != 503 || !strings.Contains(body, "caches: not synced\nnb: NB not connected") {
		t.Errorf("/readyz with two failing checks: %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d, want 200 (liveness does not follow readiness)", code)
	}
	nbDown, cachesCold = false, false
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz after recovery: %d", code)
	}
	s.Live("worker", func() error { return errors.New("stuck") }) // replaced by name
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "worker: stuck") {
		t.Errorf("/healthz with a stuck worker: %d %q", code, body)
	}
	m, err := testenv.Scrape(ctx, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Get("ovn_egress_test_total"); !ok || v != 3 {
		t.Errorf("ovn_egress_test_total = %v (present %v), want 3", v, ok)
	}
	if _, ok := m.Get("go_goroutines"); !ok {
		t.Errorf("no Go runtime metrics")
	}
}

// TestBuildInfo: ovn_egress_build_info says which build runs as what
// component, on /metrics.
func TestBuildInfo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := observe.New(observe.Config{Address: "127.0.0.1:0", Version: "v1.2.3", Commit: "abc123", Component: "node"}, quiet())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := testenv.Scrape(ctx, "http://"+s.Addr().String()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Get("ovn_egress_build_info", "version", "v1.2.3", "commit", "abc123", "component", "node", "goversion", runtime.Version()); !ok || v != 1 {
		t.Errorf("ovn_egress_build_info{version=v1.2.3,commit=abc123,component=node} = %v (present %v), want 1", v, ok)
	}
}

// TestServerPortInUse: a port already taken fails Start, it is not logged
// and forgotten.
func TestServerPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := observe.New(observe.Config{Address: l.Addr().String()}, quiet())
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("Start on a used port: %v", err)
	}
}

// TestServerOff: no address serves nothing; the checks still run.
func TestServerOff(t *testing.T) {
	s := observe.New(observe.Config{}, quiet())
	if err := s.Start(context.Background()); err != nil || s.Addr() != nil {
		t.Errorf("Start without an address: %v, %v", err, s.Addr())
	}
	s.Ready("x", func() error { return errors.New("no") })
	if err := s.IsReady(); err == nil || err.Error() != "x: no" {
		t.Errorf("IsReady: %v", err)
	}
}

// TestParseSamples: the scrape parser reads series with and without labels.
func TestParseSamples(t *testing.T) {
	m, err := testenv.ParseSamples(strings.NewReader("# HELP a x\n# TYPE a counter\na 1\nb{x=\"1\",y=\"2\"} 2.5\nc{e=\"unix:/x\"} +Inf\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Get("a"); v != 1 {
		t.Errorf("a = %v", v)
	}
	if v, ok := m.Get("b", "y", "2", "x", "1"); !ok || v != 2.5 || m.Sum("b") != 2.5 {
		t.Errorf("b = %v %v", v, ok)
	}
	if v, ok := m.Get("c", "e", "unix:/x"); !ok || v <= 1e308 {
		t.Errorf("c = %v %v", v, ok)
	}
}
