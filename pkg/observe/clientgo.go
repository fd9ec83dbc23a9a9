package observe

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// client-go's own metrics, under the names Kubernetes' components export
// them (component-base), so that the dashboards operators already have for
// controllers read ovn-egress too: every work queue's workqueue_* series
// (label name: the controller) and the API client's rest_client_* series.
// client-go takes one provider per process, so the first Server's registry
// gets them (the binaries have one).

var clientGoOnce sync.Once

// registerClientGo makes client-go's work queues and REST clients report
// into reg; only the process's first call has an effect.
func registerClientGo(reg prometheus.Registerer) {
	clientGoOnce.Do(func() {
		q := newQueueMetrics()
		r := newRESTMetrics()
		reg.MustRegister(q.depth, q.adds, q.latency, q.workDuration, q.unfinished, q.longest, q.retries,
			r.latency, r.results, r.rateLimiter)
		workqueue.SetProvider(q)
		metrics.Register(metrics.RegisterOpts{RequestLatency: r, RequestResult: r, RateLimiterLatency: rateLimiterLatency{r}})
	})
}

// queueMetrics is a workqueue.MetricsProvider.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, workDuration      *prometheus.HistogramVec
}

func newQueueMetrics() *queueMetrics {
	name := []string{"name"}
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12) // 10 ns .. ~3 h, as component-base
	return &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth",
			Help: "Current depth of workqueue"}, name),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total",
			Help: "Total number of adds handled by workqueue"}, name),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help: "How long in seconds an item stays in workqueue before being requested.", Buckets: buckets}, name),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "work_duration_seconds",
			Help: "How long in seconds processing an item from workqueue takes.", Buckets: buckets}, name),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration."}, name),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "How many seconds has the longest running processor for workqueue been running."}, name),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total",
			Help: "Total number of retries handled by workqueue"}, name),
	}
}

func (q *queueMetrics) NewDepthMetric(n string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(n)
}
func (q *queueMetrics) NewAddsMetric(n string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(n)
}
func (q *queueMetrics) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(n)
}
func (q *queueMetrics) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return q.workDuration.WithLabelValues(n)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(n)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(n)
}
func (q *queueMetrics) NewRetriesMetric(n string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(n)
}

// restMetrics are the REST client's request latency and results.
type restMetrics struct {
	latency, rateLimiter *prometheus.HistogramVec
	results              *prometheus.CounterVec
}

func newRESTMetrics() *restMetrics {
	buckets := []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	return &restMetrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
			Help: "Request latency in seconds. Broken down by verb, and host.", Buckets: buckets}, []string{"verb", "host"}),
		rateLimiter: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_rate_limiter_duration_seconds",
			Help: "Client side rate limiter latency in seconds. Broken down by verb, and host.", Buckets: buckets}, []string{"verb", "host"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: "Number of HTTP requests, partitioned by status code, method, and host."}, []string{"code", "method", "host"}),
	}
}

// Observe implements metrics.LatencyMetric.
func (r *restMetrics) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	r.latency.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

// Increment implements metrics.ResultMetric.
func (r *restMetrics) Increment(_ context.Context, code, method, host string) {
	r.results.WithLabelValues(code, method, host).Inc()
}

type rateLimiterLatency struct{ r *restMetrics }

func (l rateLimiterLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	l.r.rateLimiter.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}
