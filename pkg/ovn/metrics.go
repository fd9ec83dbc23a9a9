package ovn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what a process writes to NB. A nil *Metrics records
// nothing.
type Metrics struct {
	transactions *prometheus.CounterVec
	operations   prometheus.Counter
	duration     prometheus.Histogram
}

// NewMetrics registers the NB write metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ovn_egress_nb_transactions_total",
			Help: "NB transactions sent, by result (ok or error: refused, an operation failed, or a check did not hold).",
		}, []string{"result"}),
		operations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ovn_egress_nb_operations_total",
			Help: "OVSDB operations in NB transactions that succeeded.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ovn_egress_nb_transaction_duration_seconds",
			Help:    "Time from sending an NB transaction to its reply.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	// Both results exist from the start: an alert on errors has a series.
	m.transactions.WithLabelValues("ok")
	m.transactions.WithLabelValues("error")
	reg.MustRegister(m.transactions, m.operations, m.duration)
	return m
}

func (m *Metrics) transacted(ops int, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.duration.Observe(d.Seconds())
	if err != nil {
		m.transactions.WithLabelValues("error").Inc()
		return
	}
	m.transactions.WithLabelValues("ok").Inc()
	m.operations.Add(float64(ops))
}

// Reachable checks the connection with an echo. libovsdb's Connected
// stays true while a client with reconnect waits for a server that closed
// the connection (v0.8.1: only Close and Disconnect clear it), so it alone
// cannot tell an NB outage.
func Reachable(ctx context.Context, c client.Client) error {
	if !c.Connected() {
		return errors.New("not connected")
	}
	if err := c.Echo(ctx); err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	return nil
}

// ConnectionCollector reports whether a client is connected, and to which
// endpoint, at every scrape: ovn_egress_nb_connected{endpoint} is 1 for the
// endpoint in use, 0 (endpoint "") while disconnected.
type ConnectionCollector struct {
	c    client.Client
	desc *prometheus.Desc
}

// NewConnectionCollector collects c's connection state.
func NewConnectionCollector(c client.Client) *ConnectionCollector {
	return &ConnectionCollector{c: c, desc: prometheus.NewDesc("ovn_egress_nb_connected",
		"1 while connected to the NB endpoint named, 0 while disconnected.", []string{"endpoint"}, nil)}
}

// Describe implements prometheus.Collector.
func (cc *ConnectionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- cc.desc }

// Collect implements prometheus.Collector.
func (cc *ConnectionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if Reachable(ctx, cc.c) == nil {
		ch <- prometheus.MustNewConstMetric(cc.desc, prometheus.GaugeValue, 1, cc.c.CurrentEndpoint())
		return
	}
	ch <- prometheus.MustNewConstMetric(cc.desc, prometheus.GaugeValue, 0, "")
}
