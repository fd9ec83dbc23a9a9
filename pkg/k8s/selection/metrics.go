package selection

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Metrics are host selection's own metrics (its worker's are the
// controller skeleton's, controller "selection"). A nil *Metrics records
// nothing.
type Metrics struct {
	reg           prometheus.Registerer
	hostChanges   *prometheus.CounterVec
	probeDuration prometheus.Histogram
	probeFailures *prometheus.CounterVec
	probesLate    prometheus.Counter
	interval      prometheus.Gauge
	services      *prometheus.Desc
}

// NewMetrics registers host selection's metrics on reg; the EgressService
// states are collected once a controller is built with them.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		hostChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ovn_egress_host_changes_total",
			Help: "status.host changes away from a node, by cause (unreachable, not_ready, selector, no_local_endpoint, node_gone, service).",
		}, []string{"cause"}),
		probeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ovn_egress_health_probe_duration_seconds",
			Help:    "Time one health probe of one host took (answered or not).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. 4 s
		}),
		probeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ovn_egress_health_probe_failures_total",
			Help: "Health probes a host did not answer, by node.",
		}, []string{"node"}),
		probesLate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ovn_egress_health_probes_late_total",
			Help: "Failed health probes set aside (the master was not scheduled in time: CPU starvation): returned too long after their deadline, or their first connect started only in the second half of the timeout; the node's verdict stayed as it was.",
		}),
		interval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ovn_egress_health_interval_seconds",
			Help: "The time between two probes of one host now: --health-interval, or longer when probing every host that often would pass --health-max-rate.",
		}),
		services: prometheus.NewDesc("ovn_egress_egressservices",
			"EgressServices by state: assigned (a node hosts it), network (sourceIPBy Network) or unassigned, with the reason it has no host.",
			[]string{"state", "reason"}, nil),
	}
	for _, c := range []string{hosts.CauseUnreachable, hosts.CauseNotReady, hosts.CauseSelector,
		hosts.CauseNoLocalEndpoint, hosts.CauseNodeGone, hosts.CauseService} {
		m.hostChanges.WithLabelValues(c)
	}
	reg.MustRegister(m.hostChanges, m.probeDuration, m.probeFailures, m.probesLate, m.interval)
	return m
}

func (m *Metrics) hostChanged(sel hosts.Selection) {
	if m == nil || sel.Current == "" || sel.Current == egressv1.HostAll || sel.Host == sel.Current {
		return
	}
	m.hostChanges.WithLabelValues(sel.Cause).Inc()
}

func (m *Metrics) probed(node string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.probeDuration.Observe(d.Seconds())
	failures := m.probeFailures.WithLabelValues(node) // a probed node's series exists from its first probe
	if err != nil {
		failures.Inc()
	}
}

func (m *Metrics) roundInterval(d time.Duration) {
	if m != nil {
		m.interval.Set(d.Seconds())
	}
}

func (m *Metrics) lateProbe() {
	if m != nil {
		m.probesLate.Inc()
	}
}

// collectStates registers the EgressService states of c.
func (m *Metrics) collectStates(c *Controller) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(stateCollector{m: m, c: c})
}

type stateCollector struct {
	m *Metrics
	c *Controller
}

func (s stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- s.m.services }

// Collect counts the EgressServices of the cache by status.host and, for
// those without one, by the reason of the last sync.
func (s stateCollector) Collect(ch chan<- prometheus.Metric) {
	all, err := s.c.esLister.List(labels.Everything())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(s.m.services, err)
		return
	}
	type state struct{ state, reason string }
	n := map[state]int{{"assigned", ""}: 0, {"network", ""}: 0}
	for _, es := range all {
		switch es.Status.Host {
		case egressv1.HostAll:
			n[state{"network", ""}]++
		case "":
			n[state{"unassigned", s.c.events.unhostedReason(translate.EgressServiceKey(es))}]++
		default:
			n[state{"assigned", ""}]++
		}
	}
	for st, v := range n {
		ch <- prometheus.MustNewConstMetric(s.m.services, prometheus.GaugeValue, float64(v), st.state, st.reason)
	}
}

// unhostedOrder lists the problems that leave an EgressService without a
// host, the one reported first when several hold.
func unhostedOrder() []translate.Reason {
	return []translate.Reason{translate.ReasonServiceNotFound, translate.ReasonServiceNotLoadBalancer,
		translate.ReasonNoIngressIP, translate.ReasonInvalidIngressIP, translate.ReasonIngressIPShared, hosts.ReasonNodeLabelCollision, translate.ReasonNoEndpoints, translate.ReasonInvalidNodeSelector, translate.ReasonNoEligibleNode}
}

// unhostedReason is the first of unhostedOrder among k's problems at its
// last sync, "Pending" when none (not synced yet).
func (e *events) unhostedReason(k string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range unhostedOrder() {
		if hasReason(e.current[k], r) {
			return string(r)
		}
	}
	return "Pending"
}
