package selection

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
)

// scriptedProber fails the nodes marked down, at its deadline or — for a
// starved prober — long after it, or on time but marked ErrStarved.
type scriptedProber struct {
	mu      sync.Mutex
	down    map[string]bool
	extra   time.Duration // how long past the deadline a failure returns
	starved bool          // failures wrap ErrStarved
}

func (p *scriptedProber) Probe(ctx context.Context, node string, _ []netip.Addr) error {
	p.mu.Lock()
	down, extra, starved := p.down[node], p.extra, p.starved
	p.mu.Unlock()
	if !down {
		return nil
	}
	<-ctx.Done()
	time.Sleep(extra)
	if starved {
		return fmt.Errorf("10.244.0.2:9: %w", ErrStarved)
	}
	return errors.New("no answer")
}

func testHealth(p Prober, holdDown time.Duration) (*health, *Metrics, map[string][]bool) {
	return testHealthTimeout(p, holdDown, 100*time.Millisecond)
}

// testHealthTimeout is testHealth with another probe timeout: a long one
// keeps a starved test process from making a failure late.
func testHealthTimeout(p Prober, holdDown, timeout time.Duration) (*health, *Metrics, map[string][]bool) {
	flips := map[string][]bool{}
	var mu sync.Mutex
	h := newHealth(p, 50*time.Millisecond, timeout, holdDown, logrus.NewEntry(logrus.New()),
		func(map[string]bool) map[string][]netip.Addr {
			return map[string][]netip.Addr{"node1": {netip.MustParseAddr("10.244.0.2")}}
		},
		func(node string, reachable bool) {
			mu.Lock()
			flips[node] = append(flips[node], reachable)
			mu.Unlock()
		})
	h.metrics = NewMetrics(prometheus.NewRegistry())
	return h, h.metrics, flips
}

// TestLateProbeLeavesTheVerdict: a failed probe that returns long after its
// deadline (the master starved of CPU) does not drain the host, and is
// counted — up to maxLate in a row: the next one drains it, so a host that
// dies while the master stays starved still fails over. A probe that fails
// on time drains the host at once.
func TestLateProbeLeavesTheVerdict(t *testing.T) {
	t.Run("late", func(t *testing.T) {
		testLateProbe(t, &scriptedProber{down: map[string]bool{"node1": true}, extra: 200 * time.Millisecond}, 100*time.Millisecond)
	})
	// A probe whose connects could not start in time (ErrStarved) returns
	// on time and is set aside the same way.
	t.Run("starved", func(t *testing.T) {
		testLateProbe(t, &scriptedProber{down: map[string]bool{"node1": true}, starved: true}, 100*time.Millisecond)
	})
	t.Run("on time", func(t *testing.T) {
		p := &scriptedProber{down: map[string]bool{"node1": true}}
		h, _, flips := testHealthTimeout(p, 0, 2*time.Second)
		h.round(context.Background())
		if got := h.reachable(); got["node1"] != false || len(got) != 1 {
			t.Errorf("a failure on time did not drain the host: %v", got)
		}
		if len(flips["node1"]) != 1 || flips["node1"][0] {
			t.Errorf("verdict changes %v, want one: unreachable", flips["node1"])
		}
	})
}

func testLateProbe(t *testing.T, p *scriptedProber, timeout time.Duration) {
	h, m, flips := testHealthTimeout(p, 0, timeout)
	for range maxLate {
		h.round(context.Background())
		if got := h.reachable(); len(got) != 0 {
			t.Fatalf("a late failure drained the host: %v (flips %v)", got, flips)
		}
	}
	var late dto.Metric
	if err := m.probesLate.Write(&late); err != nil {
		t.Fatal(err)
	}
	if got := late.GetCounter().GetValue(); got != maxLate {
		t.Errorf("ovn_egress_health_probes_late_total = %v, want %d", got, maxLate)
	}
	h.round(context.Background())
	if got := h.reachable(); got["node1"] != false || len(got) != 1 {
		t.Errorf("late failure %d in a row did not drain the host: %v", maxLate+1, got)
	}
}

// TestPhasesSpreadTheProbes: each node's probe starts at a phase of its
// own within the interval, the same every round, and 1,000 nodes' phases
// cover the interval evenly (no burst of connects at its start).
func TestPhasesSpreadTheProbes(t *testing.T) {
	const spread, n, buckets = time.Second, 1000, 10
	var count [buckets]int
	for i := range n {
		node := fmt.Sprintf("node%d", i)
		d := phase(node, spread)
		if d < 0 || d >= spread {
			t.Fatalf("phase(%s) = %v, outside [0, %v)", node, d, spread)
		}
		if again := phase(node, spread); again != d {
			t.Fatalf("phase(%s) = %v then %v: not stable", node, d, again)
		}
		count[d*buckets/spread]++
	}
	for i, c := range count {
		if c < n/buckets/2 || c > n/buckets*2 {
			t.Errorf("%d of %d nodes start in tenth %d of the interval (want about %d): %v", c, n, i, n/buckets, count)
		}
	}
	if phase("node1", 0) != 0 {
		t.Error("round() (spread 0) must probe at once")
	}
}

// TestRecoveredNodeHeldDown: a node that answers again after being
// unreachable is recovering for the hold-down, then steady.
func TestRecoveredNodeHeldDown(t *testing.T) {
	p := &scriptedProber{down: map[string]bool{"node1": true}}
	h, _, _ := testHealth(p, time.Second)
	// A starved test process makes a failed probe late, which leaves the
	// verdict (TestLateProbeLeavesTheVerdict): probe until it drains, as
	// the late guard allows after maxLate rounds at most.
	for range maxLate + 1 {
		h.round(context.Background())
		if h.isUnreachable("node1") {
			break
		}
	}
	if !h.isUnreachable("node1") {
		t.Fatalf("node1 not unreachable after %d failed rounds", maxLate+1)
	}
	if len(h.recovering()) != 0 {
		t.Fatalf("an unreachable node counted as recovering: %v", h.recovering())
	}
	p.mu.Lock()
	p.down["node1"] = false
	p.mu.Unlock()
	h.round(context.Background())
	if !h.recovering()["node1"] {
		t.Fatalf("node1 answered again but is not recovering: %v", h.recovering())
	}
	time.Sleep(1100 * time.Millisecond)
	h.round(context.Background())
	if len(h.recovering()) != 0 {
		t.Errorf("node1 still recovering after its hold-down: %v", h.recovering())
	}
	// A node that never was unreachable is never recovering.
	h2, _, _ := testHealth(&scriptedProber{down: map[string]bool{}}, time.Hour)
	h2.round(context.Background())
	if len(h2.recovering()) != 0 {
		t.Errorf("a steady node counted as recovering: %v", h2.recovering())
	}
}

// countingProber counts probes by node; the nodes in slow never answer.
type countingProber struct {
	mu   sync.Mutex
	n    map[string]int
	slow map[string]bool
}

func (p *countingProber) Probe(ctx context.Context, node string, _ []netip.Addr) error {
	p.mu.Lock()
	p.n[node]++
	slow := p.slow[node]
	p.mu.Unlock()
	if slow {
		<-ctx.Done()
		return errors.New("no answer")
	}
	return nil
}

// TestUnreachableNodeDoesNotSlowTheRounds: while a node's probes take the
// whole timeout, the other hosts are still probed every interval.
func TestUnreachableNodeDoesNotSlowTheRounds(t *testing.T) {
	p := &countingProber{n: map[string]int{}, slow: map[string]bool{"node2": true}}
	h := newHealth(p, 20*time.Millisecond, 400*time.Millisecond, 0, logrus.NewEntry(logrus.New()),
		func(map[string]bool) map[string][]netip.Addr {
			a := []netip.Addr{netip.MustParseAddr("10.244.0.2")}
			return map[string][]netip.Addr{"node1": a, "node2": a}
		}, func(string, bool) {})
	ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
	defer cancel()
	h.run(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	// 800 ms at 20 ms: ~40 rounds; rounds that waited for node2 would be ~2.
	if p.n["node1"] < 10 || p.n["node2"] > 3 {
		t.Errorf("probes in 800 ms: node1 %d (want ≥ 10: its interval kept), node2 %d (want ≤ 3: one at a time)", p.n["node1"], p.n["node2"])
	}
}

// isUnreachable reads the verdict on node (tests).
func (h *health) isUnreachable(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unreachable[node]
}

// TestMaxRateStretchesTheInterval: with more hosts than the interval allows
// at the max rate, each host is probed every hosts/rate instead — 40 hosts
// at 100 probes/s: every 400 ms, not every 20 ms — and the gauge says so.
func TestMaxRateStretchesTheInterval(t *testing.T) {
	h := &health{interval: 200 * time.Millisecond, maxRate: DefaultMaxRate}
	for _, tc := range []struct {
		hosts int
		want  time.Duration
	}{{0, 200 * time.Millisecond}, {1000, 200 * time.Millisecond}, {2000, 400 * time.Millisecond}, {5000, time.Second}} {
		if got := h.roundInterval(tc.hosts); got != tc.want {
			t.Errorf("%d hosts at %d/s: interval %v, want %v", tc.hosts, DefaultMaxRate, got, tc.want)
		}
	}
	if got := (&health{interval: 200 * time.Millisecond}).roundInterval(5000); got != 200*time.Millisecond {
		t.Errorf("no cap: interval %v, want the configured 200ms", got)
	}

	p := &countingProber{n: map[string]int{}}
	targets := map[string][]netip.Addr{}
	for i := range 40 {
		targets[fmt.Sprintf("node%d", i)] = []netip.Addr{netip.MustParseAddr("10.244.0.2")}
	}
	h = newHealth(p, 20*time.Millisecond, 100*time.Millisecond, 0, logrus.NewEntry(logrus.New()),
		func(map[string]bool) map[string][]netip.Addr { return targets }, func(string, bool) {})
	h.maxRate = 100
	h.metrics = NewMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.run(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	total := 0
	for _, n := range p.n {
		total += n
	}
	// 1 s at 100/s: about 100 probes (the first round starts at once);
	// uncapped, 40 hosts every 20 ms would be about 2,000.
	if total < 40 || total > 160 {
		t.Errorf("%d probes of 40 hosts in 1 s at most 100/s; want about 100", total)
	}
	var g dto.Metric
	if err := h.metrics.interval.Write(&g); err != nil {
		t.Fatal(err)
	}
	if got := g.GetGauge().GetValue(); got != 0.4 {
		t.Errorf("ovn_egress_health_interval_seconds = %v, want 0.4", got)
	}
}
