package local

import (
	"context"
	"fmt"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// masterMetrics scrapes master replica i (inside the master pod).
func (c *cluster) masterMetrics(i int) (testenv.Samples, error) {
	return testenv.ScrapeIn(context.Background(), c.mpods[c.masterPod[i]], fmt.Sprintf("http://127.0.0.1:%d/metrics", masterMetricsPort))
}

// agentMetricsOf scrapes node's agent.
func (c *cluster) agentMetricsOf(node string) (testenv.Samples, error) {
	return testenv.ScrapeIn(context.Background(), c.dp.Hosts[node], fmt.Sprintf("http://127.0.0.1:%d/metrics", nodeMetricsPort))
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

// leakGuardDrops reads every live agent's leak-guard counters.
func (c *cluster) leakGuardDrops() map[string]guardDrops {
	out := map[string]guardDrops{}
	for node := range c.agents {
		m, err := c.agentMetricsOf(node)
		if err != nil {
			c.t.Logf("agent %s: no metrics (%v)", node, err)
			continue
		}
		const name = "ovn_egress_node_leak_guard_dropped_packets_total"
		u, ok1 := m.Get(name, "reason", "not_snatted")
		i, ok2 := m.Get(name, "reason", "conntrack_invalid")
		w, ok3 := m.Get(name, "reason", "withdrawn")
		if !ok1 || !ok2 || !ok3 {
			c.t.Errorf("agent %s: no %s by reason", node, name)
		}
		out[node] = guardDrops{unsnatted: u, invalid: i, withdrawn: w}
	}
	return out
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
