package selection

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// health probes, once per interval, every node that hosts an EgressService
// and every node found unreachable (until it answers again), each within
// the timeout, spread over the interval (each node at a phase of its own).
//
// Debounce: a node is unreachable after ONE failed probe — a probe starts
// a new connect every 100 ms within its timeout, so lost SYNs do not fail
// it, only a node silent for the whole timeout does — and
// reachable again after one successful probe. A failed probe that returned
// late (lateBy past its deadline), or whose first connect started only in
// the second half of its time (ErrStarved) — this process was not
// scheduled, as on a CPU-starved machine — says nothing about the node and
// leaves its verdict as it was — up to maxLate in a row, so that a host that dies while the
// master stays starved is still drained. Hosts are never failed back; a
// node that answers again after being unreachable is Recovering for
// holdDown — a candidate of last resort — so a flapping node cannot draw
// services while a steady one can take them. Worst case from a host's
// death to its services being moved is interval + timeout plus one sync.
type health struct {
	prober   Prober
	interval time.Duration
	maxRate  int // probes per second at most (0: no cap)
	timeout  time.Duration
	holdDown time.Duration
	log      *logrus.Entry
	// targets returns the nodes to probe with their management addresses,
	// given the nodes now unreachable.
	targets func(unreachable map[string]bool) map[string][]netip.Addr
	// changed is called when a node's verdict flips.
	changed func(node string, reachable bool)

	metrics *Metrics

	mu          sync.Mutex
	unreachable map[string]bool
	recovered   map[string]time.Time // when a node answered again after being unreachable
	lastGood    map[string]time.Time // the last answered probe of each node
	lateRun     map[string]int       // failed probes in a row of each node that returned late
	inflight    map[string]bool      // nodes being probed
	rounds      int
}

// maxLate is how many failed probes in a row may be set aside as late: a
// host that dies while the master stays starved is still drained, after
// maxLate+1 rounds.
const maxLate = 2

// late records a failed probe of node that returned late and reports
// whether it is set aside (fewer than maxLate before it in a row).
func (h *health) late(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lateRun[node]++
	return h.lateRun[node] <= maxLate
}

// errLate marks a failed probe that returned too long after its deadline
// for its verdict to mean anything.
var errLate = errors.New("the probe returned late: this process was not scheduled in time")

// lateBy is how far past its deadline a failed probe may return and still
// count: a quarter of the timeout, at least 50 ms.
func lateBy(timeout time.Duration) time.Duration { return max(timeout/4, 50*time.Millisecond) }

func newHealth(p Prober, interval, timeout, holdDown time.Duration, log *logrus.Entry,
	targets func(map[string]bool) map[string][]netip.Addr, changed func(string, bool)) *health {
	return &health{prober: p, interval: interval, timeout: timeout, holdDown: holdDown, log: log, targets: targets, changed: changed,
		unreachable: map[string]bool{}, recovered: map[string]time.Time{}, lastGood: map[string]time.Time{},
		lateRun: map[string]int{}, inflight: map[string]bool{}}
}

// run probes until ctx ends. A round does not wait for its probes: a
// node still being probed (an unreachable one takes the whole timeout) is
// left out of the next round, so the others keep their interval. A round's
// probes are spread over the interval (each node at its own phase, so its
// probes stay one interval apart): 5,000 hosts probed at once every 200 ms
// made bursts of 5,000 connects that a loaded 2-core master could not
// serve within the timeout, and 2,793 live hosts were drained (bench
// health, -size=envelope). The interval stretches to hosts/maxRate when
// that is longer: spread or not, 25,000 probes/s saturated that master.
func (h *health) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var last time.Duration
	for {
		d := h.start(ctx, &wg, true)
		if d != last && d > h.interval {
			h.log.WithField("interval", d).WithField("max-rate", h.maxRate).
				Info("health interval stretched: probing every host each --health-interval would pass --health-max-rate")
		}
		last = d
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// roundInterval is the time between two probes of one host when n hosts
// are probed (probeInterval).
func (h *health) roundInterval(n int) time.Duration { return probeInterval(h.interval, h.maxRate, n) }

// probeInterval is interval, or longer when n hosts every interval would
// pass maxRate probes per second (0: no cap).
func probeInterval(interval time.Duration, maxRate, n int) time.Duration {
	if maxRate <= 0 {
		return interval
	}
	return max(interval, time.Duration(n)*time.Second/time.Duration(maxRate))
}

// round probes every target once, all at once, and waits for the verdicts.
func (h *health) round(ctx context.Context) {
	var wg sync.WaitGroup
	h.start(ctx, &wg, false)
	wg.Wait()
}

// phase is when within a round of length spread node's probe starts: a
// hash of its name, so that it is the same every round.
func phase(node string, spread time.Duration) time.Duration {
	if spread <= 0 {
		return 0
	}
	f := fnv.New64a()
	f.Write([]byte(node))
	return time.Duration(f.Sum64() % uint64(spread))
}

// start probes every target that is not being probed already — spread
// over the round's interval (each at its phase), or all at once — and
// returns the round's interval; each verdict is applied as soon as its
// probe returns.
func (h *health) start(ctx context.Context, wg *sync.WaitGroup, spreadOut bool) time.Duration {
	targets := h.targets(h.snapshot())
	round := h.roundInterval(len(targets))
	h.metrics.roundInterval(round)
	var spread time.Duration
	if spreadOut {
		spread = round
	}
	for node, addrs := range targets {
		h.mu.Lock()
		busy := h.inflight[node]
		h.inflight[node] = true
		h.mu.Unlock()
		if busy {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { h.mu.Lock(); delete(h.inflight, node); h.mu.Unlock() }()
			if d := phase(node, spread); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			start := time.Now()
			pctx, cancel := context.WithDeadline(ctx, start.Add(h.timeout))
			err := h.prober.Probe(pctx, node, addrs)
			cancel()
			took := time.Since(start)
			starved := errors.Is(err, ErrStarved)
			if err != nil && !errors.Is(err, ErrLocal) && (took > h.timeout+lateBy(h.timeout) || starved) && h.late(node) {
				h.metrics.lateProbe()
				err = fmt.Errorf("%w (%v after its start, timeout %v): %w", errLate, took.Round(time.Millisecond), h.timeout, err)
			} else if starved {
				// maxLate starved probes in a row: the node is judged
				// silent (a host that dies while the master stays starved).
				err = fmt.Errorf("node %s unreachable: %w", node, err)
			}
			if ctx.Err() == nil {
				if !errors.Is(err, ErrLocal) && !errors.Is(err, errLate) {
					h.metrics.probed(node, took, err)
				}
				h.record(node, err)
			}
		}()
	}
	// A node marked unreachable that is no longer probed (deleted, or
	// without management addresses) is forgotten.
	h.mu.Lock()
	var gone []string
	for n := range h.unreachable {
		if _, ok := targets[n]; !ok {
			delete(h.unreachable, n)
			gone = append(gone, n)
		}
	}
	for n := range h.lastGood {
		if _, ok := targets[n]; !ok {
			delete(h.lastGood, n)
		}
	}
	for n := range h.lateRun {
		if _, ok := targets[n]; !ok {
			delete(h.lateRun, n)
		}
	}
	for n, t := range h.recovered {
		if time.Since(t) >= h.holdDown {
			delete(h.recovered, n)
		}
	}
	h.rounds++
	h.mu.Unlock()
	for _, n := range gone {
		h.changed(n, true)
	}
	return round
}

func (h *health) record(node string, err error) {
	log := h.log.WithField("node", node)
	h.mu.Lock()
	was := h.unreachable[node]
	if !errors.Is(err, errLate) && !errors.Is(err, ErrLocal) {
		delete(h.lateRun, node) // an answer, or a failure on time
	}
	switch {
	case err == nil:
		if was {
			h.recovered[node] = time.Now()
		}
		delete(h.unreachable, node)
		h.lastGood[node] = time.Now()
	case errors.Is(err, ErrLocal), errors.Is(err, errLate):
		h.mu.Unlock()
		log.WithError(err).Warn("health probe failed on this machine; verdict unchanged")
		return
	default:
		h.unreachable[node] = true
	}
	now := h.unreachable[node]
	h.mu.Unlock()
	switch {
	case now && !was:
		log.WithError(err).Warn("host unreachable; draining it")
		h.changed(node, false)
	case !now && was:
		if h.holdDown > 0 {
			log = log.WithField("hold-down", h.holdDown)
		}
		log.Info("node reachable again (a host of last resort during its hold-down)")
		h.changed(node, true)
	}
}

// lastAnswered is node's last answered probe (zero when none).
func (h *health) lastAnswered(node string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastGood[node]
}

// snapshot returns the nodes now unreachable.
func (h *health) snapshot() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.unreachable)
}

// reachable returns the verdicts as selection reads them: false for every
// unreachable node, absent (reachable) for the others.
func (h *health) reachable() map[string]bool {
	out := map[string]bool{}
	if h == nil {
		return out
	}
	for n := range h.snapshot() {
		out[n] = false
	}
	return out
}

// recovering returns the reachable nodes still in their hold-down after
// being unreachable.
func (h *health) recovering() map[string]bool {
	out := map[string]bool{}
	if h == nil {
		return out
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for n, t := range h.recovered {
		if !h.unreachable[n] && time.Since(t) < h.holdDown {
			out[n] = true
		}
	}
	return out
}

// roundCount counts the probe rounds so far.
func (h *health) roundCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rounds
}
