package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics instruments every Worker of a process, labelled by controller.
// A nil *Metrics records nothing.
type Metrics struct {
	syncDuration *prometheus.HistogramVec
	syncErrors   *prometheus.CounterVec
	adds         *prometheus.CounterVec
	retries      *prometheus.CounterVec
	queueDepth   *prometheus.GaugeVec
}

// NewMetrics registers the controller metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ovn_egress_controller_sync_duration_seconds",
			Help:    "Time one sync of a batch of keys took, by controller.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
		}, []string{"controller"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ovn_egress_controller_sync_errors_total",
			Help: "Syncs that returned an error, by controller.",
		}, []string{"controller"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ovn_egress_controller_queue_adds_total",
			Help: "Keys marked dirty, by controller.",
		}, []string{"controller"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ovn_egress_controller_retries_total",
			Help: "Keys requeued with backoff after a failed sync, by controller.",
		}, []string{"controller"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ovn_egress_controller_queue_depth",
			Help: "Dirty keys waiting, by controller.",
		}, []string{"controller"}),
	}
	reg.MustRegister(m.syncDuration, m.syncErrors, m.adds, m.retries, m.queueDepth)
	return m
}

// start makes a controller's series exist from its start (at 0), so that
// rules and dashboards find them before anything happened.
func (m *Metrics) start(name string) {
	if m == nil {
		return
	}
	m.syncErrors.WithLabelValues(name)
	m.adds.WithLabelValues(name)
	m.retries.WithLabelValues(name)
	m.queueDepth.WithLabelValues(name)
}

func (m *Metrics) added(name string, n, depth int) {
	if m == nil {
		return
	}
	m.adds.WithLabelValues(name).Add(float64(n))
	m.queueDepth.WithLabelValues(name).Set(float64(depth))
}

func (m *Metrics) depth(name string, depth int) {
	if m == nil {
		return
	}
	m.queueDepth.WithLabelValues(name).Set(float64(depth))
}

func (m *Metrics) synced(name string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.syncDuration.WithLabelValues(name).Observe(d.Seconds())
	if err != nil {
		m.syncErrors.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) retried(name string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(name).Inc()
}
