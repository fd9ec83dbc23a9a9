package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
)

// instrument registers the master's metrics on obs (none when obs is nil)
// and marks it not ready until the checks of checks() replace that.
func instrument(cfg *Config, obs *observe.Server) prometheus.Gauge {
	if obs == nil {
		return nil
	}
	obs.Ready("master", func() error { return errors.New("starting") })
	reg := obs.Registry()
	cfg.NB.Registry = reg
	work := controller.NewMetrics(reg)
	cfg.Translation.Work, cfg.Select.Work = work, work
	cfg.Translation.NB = ovn.NewMetrics(reg)
	cfg.Select.Metrics = selection.NewMetrics(reg)
	fo := newFailovers(reg)
	cfg.Select.Failovers, cfg.Translation.Failovers = fo, fo
	leader := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovn_egress_master_leader",
		Help: "1 while this replica holds the Lease and runs the controllers."})
	reg.MustRegister(leader)
	return leader
}

// observeNB adds the NB connection gauge.
func observeNB(obs *observe.Server, nb client.Client) {
	if obs != nil && nb != nil {
		obs.Registry().MustRegister(ovn.NewConnectionCollector(nb))
	}
}

// checks installs the master's liveness and readiness: ready once its
// informers synced, while the NB is connected (a standby too: it is then
// ready to take the Lease) and while it is not standing back from
// ovn-kubernetes' own egress-service feature; alive while no sync is stuck.
func (m *Master) checks(obs *observe.Server) {
	if obs == nil {
		return
	}
	obs.Ready("master", func() error {
		var errs []error
		if m.nb != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := ovn.Reachable(ctx, m.nb); err != nil {
				errs = append(errs, fmt.Errorf("NB not connected: %w", err))
			}
		}
		if !m.Synced() {
			errs = append(errs, errors.New("informer caches not synced"))
		}
		if c := m.coexist.Conflict(); c.Active() {
			errs = append(errs, fmt.Errorf("standing back, writing nothing: %s", c))
		}
		if c := m.coexist.Conflict(); m.eip != nil && c.EgressIPActive() {
			errs = append(errs, fmt.Errorf("EgressIP standing back: %s", c.EgressIPString()))
		}
		return errors.Join(errs...)
	})
	obs.Live("master", func() error {
		var errs []error
		for _, ctl := range m.controllers() {
			errs = append(errs, ctl.Stuck(controller.StuckBound))
		}
		return errors.Join(errs...)
	})
}

// setLeader records leadership in the gauge.
func (m *Master) setLeader(on bool) {
	if m.leader == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.leader.Set(v)
}

// failovers times each drained service from its dead host's last answered
// probe to the NB transaction that put its endpoints into the new host's
// rows: the part of a failover ovn-egress controls (what follows is OVN
// and the announcer).
type failovers struct {
	seconds prometheus.Histogram

	mu      sync.Mutex
	pending map[string]failover // by service
	n       atomic.Int64        // len(pending), read without the lock
}

type failover struct {
	to    string
	since time.Time
}

func newFailovers(reg prometheus.Registerer) *failovers {
	f := &failovers{pending: map[string]failover{}, seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ovn_egress_failover_seconds",
		Help:    "From an unreachable host's last answered probe to its services' NB rows repointed to the new host, per service.",
		Buckets: []float64{0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30},
	})}
	reg.MustRegister(f.seconds)
	return f
}

// Drained implements selection.Failovers.
func (f *failovers) Drained(service, to string, lastGood time.Time) {
	if lastGood.IsZero() {
		return // never answered: nothing to time from
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, p := range f.pending {
		if time.Since(p.since) > 10*time.Minute { // its rows never came (the service went)
			delete(f.pending, k)
		}
	}
	f.pending[service] = failover{to: to, since: lastGood}
	f.n.Store(int64(len(f.pending)))
}

// Pending implements translation.Failovers.
func (f *failovers) Pending() bool { return f.n.Load() > 0 }

// Repointed implements translation.Failovers.
func (f *failovers) Repointed(service, host string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pending[service]
	if !ok || p.to != host {
		return
	}
	f.seconds.Observe(time.Since(p.since).Seconds())
	delete(f.pending, service)
	f.n.Store(int64(len(f.pending)))
}
