package controller

import (
	"context"
	"sync"
	"time"
)

// A Gate lets one controller hold back another's next batch while it writes
// objects the other reads. The writer closes the gate for the time of its
// writes and until its own informer shows them; the reader's Worker, once a
// key is dirty, waits for the gate to open (at most its bound) before it
// takes its batch. A burst of writes then lands in one sync of the reader
// instead of one sync per echo, each walking what the echoes before it
// already walked: host selection writing a drained host's status.host for
// hundreds of EgressServices, and translation repointing their rows.
//
// The zero Gate is open; a nil *Gate is always open.
type Gate struct {
	mu     sync.Mutex
	closed int           // writers holding it closed
	open   chan struct{} // closed when the last writer opens it; nil while open
}

// Close closes the gate until the returned func is called (once; later
// calls do nothing). Writers may overlap: the gate opens when the last one
// has opened it.
func (g *Gate) Close() (open func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.closed == 0 {
		g.open = make(chan struct{})
	}
	g.closed++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.closed--
			if g.closed == 0 {
				close(g.open)
				g.open = nil
			}
		})
	}
}

// Wait returns at once when the gate is open, otherwise when it opens, ctx
// ends or bound has passed. It returns how long it waited and whether the
// gate was open when it returned.
func (g *Gate) Wait(ctx context.Context, bound time.Duration) (time.Duration, bool) {
	if g == nil {
		return 0, true
	}
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	if ch == nil {
		return 0, true
	}
	start := time.Now()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-ch:
		return time.Since(start), true
	case <-ctx.Done():
	case <-t.C:
	}
	return time.Since(start), false
}
