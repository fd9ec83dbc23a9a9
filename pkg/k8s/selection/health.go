package selection

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// health probes, once per interval, every node that hosts an EgressService
// and every node found unreachable (until it answers again), all in
// parallel, each within the timeout.
//
// Debounce: a node is unreachable after ONE failed probe — a probe already
// retries within its timeout, so a single lost SYN does not fail it — and
// reachable again after one successful probe. Hosts are never failed back,
// so a flapping node can only lose services, never pull them back and
// forth. Worst case from a host's death to its services being moved is
// interval + timeout (2 s at the defaults) plus one sync.
type health struct {
	prober   Prober
	interval time.Duration
	timeout  time.Duration
	log      *logrus.Entry
	// targets returns the nodes to probe with their management addresses,
	// given the nodes now unreachable.
	targets func(unreachable map[string]bool) map[string][]netip.Addr
	// changed is called when a node's verdict flips.
	changed func(node string, reachable bool)

	metrics *Metrics

	mu          sync.Mutex
	unreachable map[string]bool
	lastGood    map[string]time.Time // the last answered probe of each node
	rounds      int
}

func newHealth(p Prober, interval, timeout time.Duration, log *logrus.Entry,
	targets func(map[string]bool) map[string][]netip.Addr, changed func(string, bool)) *health {
	return &health{prober: p, interval: interval, timeout: timeout, log: log, targets: targets, changed: changed,
		unreachable: map[string]bool{}, lastGood: map[string]time.Time{}}
}

// run probes until ctx ends.
func (h *health) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		h.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round probes every target once; each verdict is applied as soon as its
// probe returns.
func (h *health) round(ctx context.Context) {
	targets := h.targets(h.snapshot())
	var wg sync.WaitGroup
	for node, addrs := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, h.timeout)
			start := time.Now()
			err := h.prober.Probe(pctx, node, addrs)
			cancel()
			if ctx.Err() == nil {
				if !errors.Is(err, ErrLocal) {
					h.metrics.probed(node, time.Since(start), err)
				}
				h.record(node, err)
			}
		}()
	}
	wg.Wait()
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
	h.rounds++
	h.mu.Unlock()
	for _, n := range gone {
		h.changed(n, true)
	}
}

func (h *health) record(node string, err error) {
	log := h.log.WithField("node", node)
	h.mu.Lock()
	was := h.unreachable[node]
	switch {
	case err == nil:
		delete(h.unreachable, node)
		h.lastGood[node] = time.Now()
	case errors.Is(err, ErrLocal):
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
		log.Info("node reachable again")
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

// roundCount counts the probe rounds so far.
func (h *health) roundCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rounds
}
