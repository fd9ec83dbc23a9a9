package local

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// masterMetrics scrapes master replica i (inside the master pod).
func (c *cluster) masterMetrics(i int) (testenv.Samples, error) {
	return testenv.ScrapeIn(context.Background(), c.mpods[c.masterPod[i]], fmt.Sprintf("http://127.0.0.1:%d/metrics", masterMetricsPort))
}

// agentURL is path on node's agent listener: the node's IP (the chart
// binds status.hostIP only), in its host namespace.
func (c *cluster) agentURL(node, path string) string {
	return "http://" + net.JoinHostPort(c.topo.Node(node).HostIPs[0].Addr().String(), strconv.Itoa(nodeMetricsPort)) + path
}

// agentMetricsOf scrapes node's agent.
func (c *cluster) agentMetricsOf(node string) (testenv.Samples, error) {
	return testenv.ScrapeIn(context.Background(), c.dp.Hosts[node], c.agentURL(node, "/metrics"))
}

// leaderMetric waits until the lease holder's metric (name, labels) has
// the value want, and fails the test with the last value seen otherwise.
func (c *cluster) leaderMetric(want float64, name string, labels ...string) {
	c.t.Helper()
	c.leaderMetricIs(func(v float64) bool { return v == want }, fmt.Sprint(want), name, labels...)
}

// leaderMetricAtLeast waits until the lease holder's metric reaches min.
func (c *cluster) leaderMetricAtLeast(min float64, name string, labels ...string) {
	c.t.Helper()
	c.leaderMetricIs(func(v float64) bool { return v >= min }, fmt.Sprintf("≥ %v", min), name, labels...)
}

func (c *cluster) leaderMetricIs(ok func(float64) bool, want, name string, labels ...string) {
	c.t.Helper()
	var i int
	var got float64
	var present bool
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		i = c.leaderIndex() // the lease may move while we wait
		var m testenv.Samples
		if m, err = c.masterMetrics(i); err == nil {
			if got, present = m.Get(name, labels...); present && ok(got) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Errorf("leader master-%d: %s = %v (present %v, scrape error %v), want %v", i, testenv.Series(name, labels...), got, present, err, want)
}

// guardDrops are one agent's leak-guard drop counts.
type guardDrops struct{ unsnatted, invalid, withdrawn float64 }

// leakGuardDrops reads every live agent's leak-guard counters (one the
// test killed has none to read; one that exited on its own is an error). An agent serves /metrics before its
// controller (which registers the counters) is built, so each agent is
// given until its series show.
func (c *cluster) leakGuardDrops() map[string]guardDrops {
	out := map[string]guardDrops{}
	const name = "ovn_egress_node_leak_guard_dropped_packets_total"
	for node, p := range c.agents {
		if p.Stopped() {
			c.t.Logf("agent %s: stopped by the test, no leak-guard counters to read", node)
			continue
		}
		var d guardDrops
		var err error
		present := false
		for deadline := time.Now().Add(20 * time.Second); !present && time.Now().Before(deadline); {
			var m testenv.Samples
			if m, err = c.agentMetricsOf(node); err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			var ok1, ok2, ok3 bool
			d.unsnatted, ok1 = m.Get(name, "reason", "not_snatted")
			d.invalid, ok2 = m.Get(name, "reason", "conntrack_invalid")
			d.withdrawn, ok3 = m.Get(name, "reason", "withdrawn")
			if present = ok1 && ok2 && ok3; !present {
				time.Sleep(200 * time.Millisecond)
			}
		}
		if !present {
			c.t.Errorf("agent %s: no %s by reason (last scrape error %v)", node, name, err)
			continue
		}
		out[node] = d
	}
	return out
}

// agentReady waits until node's agent answers /readyz with 200 (its
// caches synced and its controller running).
func (c *cluster) agentReady(node string, timeout time.Duration) {
	c.t.Helper()
	var code int
	var body string
	var err error
	url := c.agentURL(node, "/readyz")
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if code, body, err = testenv.HTTPGetIn(context.Background(), c.dp.Hosts[node], url); err == nil && code == http.StatusOK {
			return
		}
	}
	c.t.Fatalf("agent %s not ready after %v: %d %q (%v)", node, timeout, code, body, err)
}

// leaderSyncErrors is the lease holder's sync error count, all controllers.
func (c *cluster) leaderSyncErrors() float64 {
	c.t.Helper()
	m, err := c.masterMetrics(c.leaderIndex())
	if err != nil {
		c.t.Fatal(err)
	}
	return m.Sum("ovn_egress_controller_sync_errors_total")
}
