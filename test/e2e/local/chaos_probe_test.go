//go:build chaos

package local

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// probers ask the outside from every pod all the time and check each
// answer's source: an LB IP of the pod's service or the address of the
// pod's node — never anything else.
type probers struct {
	mu         sync.Mutex
	answered   int
	unanswered int
	sources    map[string]int
	violations []string
	at         []time.Time
	done       chan struct{}
	wg         sync.WaitGroup
}

func (s *chaosState) startProbers() *probers {
	c := s.c
	pr := &probers{sources: map[string]int{}, done: make(chan struct{})}
	ext := c.dp.ExtIPs()
	for name, pods := range s.pools {
		for _, p := range pods {
			allowed := s.allowedSources(name, p)
			pr.wg.Add(1)
			go func() {
				defer pr.wg.Done()
				for i := 0; ; i++ {
					select {
					case <-pr.done:
						return
					case <-time.After(200 * time.Millisecond):
					}
					dst := ext[i%len(ext)]
					got, err := testenv.Ask(p.ns, "tcp", netip.AddrPortFrom(dst, echoPort), 500*time.Millisecond)
					class, ok := allowed(got)
					pr.mu.Lock()
					switch {
					case err != nil:
						pr.unanswered++
					case ok:
						pr.answered++
						pr.sources[class]++
					default:
						now := time.Now()
						pr.answered++
						pr.sources["other"]++
						pr.violations = append(pr.violations, fmt.Sprintf("%s %s (%s) seen as %s", now.Format("15:04:05.000"), p.name, name, got))
						pr.at = append(pr.at, now)
					}
					pr.mu.Unlock()
				}
			}()
		}
	}
	return pr
}

func (pr *probers) stop() { close(pr.done); pr.wg.Wait() }

func (pr *probers) results() (int, int, map[string]int, []string, []time.Time) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.answered, pr.unanswered, pr.sources, pr.violations, pr.at
}

// monitor runs the convergence checks back to back in the background for
// the per-fault convergence times: status.host, labels and SNAT maps in
// agreement with the API objects (disagreements) and `ovn-egress verify`
// finding no drift.
type monitor struct {
	mu     sync.Mutex
	checks []convergenceCheck
	done   chan struct{}
	wg     sync.WaitGroup
}

type convergenceCheck struct {
	start, end time.Time
	ok         bool
}

// monitorPause is the pause between two checks (one takes ~0.2 s: a
// verify process, the API reads and nft on three hosts).
const monitorPause = 50 * time.Millisecond

func (s *chaosState) startMonitor() *monitor {
	m := &monitor{done: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case <-m.done:
				return
			case <-time.After(monitorPause):
			}
			start := time.Now()
			ok := len(s.disagreements(s.currentLBs())) == 0
			if ok {
				_, err := s.c.verify(context.Background())
				ok = err == nil
			}
			m.mu.Lock()
			m.checks = append(m.checks, convergenceCheck{start: start, end: time.Now(), ok: ok})
			m.mu.Unlock()
		}
	}()
	return m
}

func (m *monitor) stop() { close(m.done); m.wg.Wait() }

// convergenceStats are one fault kind's convergence times after its heals:
// all of them, and those of isolated heals (no other fault held anything
// from the heal until convergence).
type convergenceStats struct {
	Heals          int    `json:"heals"`
	Median         string `json:"median"`
	Worst          string `json:"worst"`
	Isolated       int    `json:"isolated"`
	IsolatedMedian string `json:"isolated_median,omitempty"`
	IsolatedWorst  string `json:"isolated_worst,omitempty"`
	Unconverged    int    `json:"unconverged,omitempty"`
}

// convergence computes each heal's convergence time — from the heal to the
// end of the first check that started after it and passed — by fault kind,
// and the number of checks run.
func (s *chaosState) convergence(m *monitor) (map[string]convergenceStats, int) {
	m.mu.Lock()
	checks := slices.Clone(m.checks)
	m.mu.Unlock()
	s.mu.Lock()
	faults := slices.Clone(s.faults)
	s.mu.Unlock()
	all, isolated := map[string][]time.Duration{}, map[string][]time.Duration{}
	out := map[string]convergenceStats{}
	for i, f := range faults {
		if f.end.IsZero() {
			continue
		}
		j := slices.IndexFunc(checks, func(ch convergenceCheck) bool { return ch.ok && !ch.start.Before(f.end) })
		if j < 0 {
			st := out[f.kind]
			st.Unconverged++
			out[f.kind] = st
			continue
		}
		d := checks[j].end.Sub(f.end)
		all[f.kind] = append(all[f.kind], d)
		alone := true
		for k, o := range faults {
			if k != i && o.start.Before(f.end.Add(d)) && (o.end.IsZero() || o.end.After(f.end)) {
				alone = false
			}
		}
		if alone {
			isolated[f.kind] = append(isolated[f.kind], d)
		}
	}
	for kind, ds := range all {
		st := out[kind]
		st.Heals = len(ds)
		st.Median, st.Worst = medianWorst(ds)
		st.Isolated = len(isolated[kind])
		if st.Isolated > 0 {
			st.IsolatedMedian, st.IsolatedWorst = medianWorst(isolated[kind])
		}
		out[kind] = st
	}
	return out, len(checks)
}

func medianWorst(ds []time.Duration) (string, string) {
	slices.Sort(ds)
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return r(ds[(len(ds)-1)/2]), r(ds[len(ds)-1])
}
