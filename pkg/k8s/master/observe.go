package master

import (
	"context"
	"errors"
	"fmt"
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
	work := controller.NewMetrics(reg)
	cfg.Sync.Work, cfg.Select.Work = work, work
	cfg.Sync.NB = ovn.NewMetrics(reg)
	cfg.Select.Metrics = selection.NewMetrics(reg)
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
		if !m.sel.Synced() || (m.sync != nil && !m.sync.Synced()) {
			errs = append(errs, errors.New("informer caches not synced"))
		}
		if c := m.coexist.Conflict(); c.Active() {
			errs = append(errs, fmt.Errorf("standing back, writing nothing: %s", c))
		}
		return errors.Join(errs...)
	})
	obs.Live("master", func() error {
		errs := []error{m.sel.Stuck(controller.StuckBound)}
		if m.sync != nil {
			errs = append(errs, m.sync.Stuck(controller.StuckBound))
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
