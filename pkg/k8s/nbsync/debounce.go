package nbsync

import (
	"sync"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Host moves are gathered briefly: when a host is drained, host selection
// writes the new status.host of all its services within a fraction of a
// second, and syncing each as it arrives would translate (nearly) every
// host again and again. The keys are released together once the writes go
// quiet for hostMoveQuiet, and at the latest hostMoveMax after the first.
const (
	hostMoveQuiet = 30 * time.Millisecond
	hostMoveMax   = 300 * time.Millisecond
)

// debouncer collects keys and hands them to release together after a quiet
// period, bounded by a maximum delay from the first key.
type debouncer struct {
	quiet, max time.Duration
	release    func([]translate.Key)

	mu    sync.Mutex
	keys  map[translate.Key]bool
	first time.Time
	timer *time.Timer
}

func newDebouncer(quiet, max time.Duration, release func([]translate.Key)) *debouncer {
	return &debouncer{quiet: quiet, max: max, release: release, keys: map[translate.Key]bool{}}
}

func (d *debouncer) add(keys []translate.Key) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if len(d.keys) == 0 {
		d.first = now
	}
	for _, k := range keys {
		d.keys[k] = true
	}
	wait := min(d.quiet, d.max-now.Sub(d.first))
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timer = time.AfterFunc(max(wait, 0), d.fire)
}

func (d *debouncer) fire() {
	d.mu.Lock()
	keys := make([]translate.Key, 0, len(d.keys))
	for k := range d.keys {
		keys = append(keys, k)
	}
	d.keys = map[translate.Key]bool{}
	d.mu.Unlock()
	if len(keys) > 0 {
		d.release(keys)
	}
}
