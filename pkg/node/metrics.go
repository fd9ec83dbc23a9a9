package node

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node agent's own metrics (the worker's are the
// controller skeleton's, controller "node"). A nil *Metrics records
// nothing.
type Metrics struct {
	rules, snat, services prometheus.Gauge
	applyErrors           prometheus.Counter
	reportLag             prometheus.Histogram
	drops                 *prometheus.Desc
	// readDrops reads the leak guard's counters (set by the controller).
	readDrops func(context.Context) (GuardDrops, error)
	reg       prometheus.Registerer
}

// NewMetrics registers the agent's metrics on reg; the leak guard's
// counter is collected once the controller runs.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rules: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovn_egress_node_ip_rules",
			Help: "ip rules the agent has programmed at its priority (both families)."}),
		snat: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovn_egress_node_snat_elements",
			Help: "Endpoint → load-balancer IP elements in the agent's SNAT maps (both families)."}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovn_egress_node_ready_services",
			Help: "EgressServices this node reports ready (programmed here)."}),
		applyErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovn_egress_node_apply_errors_total",
			Help: "Applies of the node plan (ip rules, nftables, sysctls) that failed; each is retried."}),
		reportLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovn_egress_node_report_lag_seconds",
			Help:    "From the start of a sync to its changed readiness report written on the Node (the master reroutes after it).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		drops: prometheus.NewDesc("ovn_egress_node_leak_guard_dropped_packets_total",
			"Packets the leak guard dropped because they would have left the node with a pod address, by reason: not_snatted (a served endpoint's packet no SNAT rewrote: always worth an alert) conntrack_invalid (a pod's packet conntrack did not track: the remains of connections that moved host or lost their route) or withdrawn (an endpoint's packet rerouted here after its SNAT was removed: the master could not take the reroute out in time, as during an NB outage). Read from the nftables counters leak-guard-unsnatted, leak-guard-invalid and leak-guard-withdrawn.",
			[]string{"reason"}, nil),
		reg: reg,
	}
	reg.MustRegister(m.rules, m.snat, m.services, m.applyErrors, m.reportLag)
	return m
}

// applied records what an apply reached.
func (m *Metrics) applied(res Result, ready int, err error) {
	if m == nil {
		return
	}
	m.rules.Set(float64(len(res.Reached.Rules)))
	m.snat.Set(float64(len(res.Reached.SNAT)))
	m.services.Set(float64(ready))
	if err != nil {
		m.applyErrors.Inc()
	}
}

// reported records a readiness report written d after its sync began.
func (m *Metrics) reported(d time.Duration) {
	if m != nil {
		m.reportLag.Observe(d.Seconds())
	}
}

// collectDrops starts collecting the leak guard's counters through read.
func (m *Metrics) collectDrops(read func(context.Context) (GuardDrops, error)) error {
	if m == nil {
		return nil
	}
	m.readDrops = read
	return m.reg.Register(dropCollector{m})
}

type dropCollector struct{ m *Metrics }

func (d dropCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.m.drops }

// Collect reads the counter at scrape time; a failed read reports no
// sample (the scrape shows the gap instead of a made-up 0).
func (d dropCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := d.m.readDrops(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(d.m.drops, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(d.m.drops, prometheus.CounterValue, float64(n.Unsnatted), "not_snatted")
	ch <- prometheus.MustNewConstMetric(d.m.drops, prometheus.CounterValue, float64(n.Invalid), "conntrack_invalid")
	ch <- prometheus.MustNewConstMetric(d.m.drops, prometheus.CounterValue, float64(n.Withdrawn), "withdrawn")
}
