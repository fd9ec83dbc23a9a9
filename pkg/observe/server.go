// Package observe serves a component's Prometheus metrics and its health:
// /metrics, /healthz (liveness: the process works, no worker is stuck) and
// /readyz (readiness: caches synced, the NB connected) on one listener.
// Checks are registered by the parts that know them, possibly after the
// listener started (a master serves "not ready" while it connects).
package observe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
)

// Config configures the listener.
type Config struct {
	// Address is host:port to listen on ("" serves nothing; the checks and
	// metrics are still kept, for tests).
	Address string
	// Version and Commit label ovn_egress_build_info (when Version is set).
	Version, Commit string
	// Component labels it too: master or node.
	Component string
}

// Check returns nil when what it checks is fine.
type Check func() error

// Server holds a component's registry and checks, and serves them.
type Server struct {
	cfg Config
	log *logrus.Entry
	reg *prometheus.Registry

	mu    sync.Mutex
	live  map[string]Check
	ready map[string]Check
	addr  net.Addr
}

// New returns a Server whose registry already has the Go runtime and
// process collectors and, for the process's first Server, client-go's work
// queue and REST client metrics.
func New(cfg Config, log *logrus.Entry) *Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerClientGo(reg)
	if cfg.Version != "" {
		info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovn_egress_build_info",
			Help:        "Always 1; the labels say which build runs (version, commit, Go version) and as what component.",
			ConstLabels: prometheus.Labels{"version": cfg.Version, "commit": cfg.Commit, "goversion": runtime.Version(), "component": cfg.Component}})
		info.Set(1)
		reg.MustRegister(info)
	}
	return &Server{cfg: cfg, log: log, reg: reg, live: map[string]Check{}, ready: map[string]Check{}}
}

// Registry is where the component registers its metrics.
func (s *Server) Registry() prometheus.Registerer { return s.reg }

// Gatherer reads the registry (tests).
func (s *Server) Gatherer() prometheus.Gatherer { return s.reg }

// Live adds (or, with the same name, replaces) a liveness check.
func (s *Server) Live(name string, c Check) { s.set(s.live, name, c) }

// Ready adds (or replaces) a readiness check.
func (s *Server) Ready(name string, c Check) { s.set(s.ready, name, c) }

func (s *Server) set(m map[string]Check, name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m[name] = c
}

// Healthy runs the liveness checks.
func (s *Server) Healthy() error { return s.run(s.live) }

// IsReady runs the readiness checks. A process none of whose components
// has registered a check yet is still starting (discovering its networks,
// say), not ready.
func (s *Server) IsReady() error {
	s.mu.Lock()
	none := len(s.ready) == 0
	s.mu.Unlock()
	if none {
		return errors.New("starting: no component running yet")
	}
	return s.run(s.ready)
}

// run calls every check of m, in name order, and joins the failures, each
// prefixed with its check's name.
func (s *Server) run(m map[string]Check) error {
	s.mu.Lock()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	checks := make([]Check, len(names))
	sort.Strings(names)
	for i, n := range names {
		checks[i] = m[n]
	}
	s.mu.Unlock()
	var errs []error
	for i, c := range checks {
		if err := c(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", names[i], err))
		}
	}
	return errors.Join(errs...)
}

// Handler serves /metrics, /healthz and /readyz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", s.serveCheck(s.Healthy))
	mux.HandleFunc("/readyz", s.serveCheck(s.IsReady))
	return mux
}

// serveCheck answers 200 "ok", or 503 with every failed check on a line.
func (s *Server) serveCheck(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Addr is the address the listener is bound to (nil before Start, or when
// serving nothing): the port a ":0" address chose.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Start binds the listener and serves until ctx ends. A bind error is
// returned at once (a port in use fails the process, it is not a warning).
func (s *Server) Start(ctx context.Context) error {
	if s.cfg.Address == "" {
		return nil
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Address)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	s.mu.Lock()
	s.addr = l.Addr()
	s.mu.Unlock()
	// Bounded in every phase: a client that sends slowly, reads slowly or
	// idles holds a connection for seconds, not forever.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.WithError(err).Error("metrics listener stopped")
		}
	}()
	s.log.WithField("address", l.Addr().String()).Info("serving /metrics, /healthz and /readyz")
	return nil
}
