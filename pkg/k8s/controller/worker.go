package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"
)

// Config tunes one Worker.
type Config[K comparable] struct {
	// Name names the controller in logs and metrics.
	Name string
	// MaxBatch bounds the keys synced together (0: 1, one key at a time).
	MaxBatch int
	// Window, when it returns more than zero, is how long the worker waits
	// after the first dirty key for more to gather.
	Window func() time.Duration
	// Gate, when set, is waited for after the first dirty key (and the
	// window), at most GateBound, before the batch is taken: another
	// controller closes it while it writes objects this one reads.
	Gate      *Gate
	GateBound time.Duration
	// RateLimiter spaces a failed key's retries (nil: client-go's default
	// controller limiter, exponential per key from 5 ms to 1000 s, and an
	// overall 10/s bucket).
	RateLimiter workqueue.TypedRateLimiter[K]
	// Metrics, when set, records the worker's syncs, queue and errors.
	Metrics *Metrics
}

// SyncFunc converges keys. It returns nil, a KeyErrors naming the keys that
// failed, or one error for the whole batch — a batch of more than one key
// that fails as a whole is retried key by key, so that one bad key cannot
// hold the others back.
type SyncFunc[K comparable] func(ctx context.Context, keys []K) error

// KeyErrors are the per-key failures of one sync.
type KeyErrors[K comparable] map[K]error

func (e KeyErrors[K]) Error() string {
	var s []string
	for k, err := range e {
		s = append(s, fmt.Sprintf("%v: %v", k, err))
	}
	sort.Strings(s)
	return strings.Join(s, "; ")
}

// Worker drains a rate-limited queue of keys through a SyncFunc.
type Worker[K comparable] struct {
	cfg   Config[K]
	sync  SyncFunc[K]
	log   *logrus.Entry
	queue workqueue.TypedRateLimitingInterface[K]

	// adding is held by Add while it queues its keys and by next while it
	// takes a batch: keys added together are taken together (a drained
	// host's hundreds of EgressServices make one batch, not a first key
	// alone and the rest after it).
	adding sync.Mutex

	busy    atomic.Int64 // keys being synced
	started atomic.Int64 // unix nanoseconds the running sync started, 0 when none

	mu    sync.Mutex
	stats WorkerStats
	// failing holds the keys whose every sync since failure.since failed.
	failing map[K]failure
}

// failure is a key's unbroken run of failed syncs.
type failure struct {
	since time.Time
	err   error
}

// WorkerStats counts what a Worker did since it was built.
type WorkerStats struct {
	// Syncs counts SyncFunc calls.
	Syncs int
	// Errors counts keys whose sync failed (each is retried).
	Errors int
}

// New builds a Worker; Run drains it.
func New[K comparable](cfg Config[K], sync SyncFunc[K], log *logrus.Entry) *Worker[K] {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1
	}
	cfg.Metrics.start(cfg.Name)
	rl := cfg.RateLimiter
	if rl == nil {
		rl = workqueue.DefaultTypedControllerRateLimiter[K]()
	}
	return &Worker[K]{cfg: cfg, sync: sync, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[K]{Name: cfg.Name})}
}

// Add marks keys dirty; keys added in one call are taken in one batch
// (up to MaxBatch).
func (w *Worker[K]) Add(keys ...K) {
	w.adding.Lock()
	for _, k := range keys {
		w.queue.Add(k)
	}
	w.adding.Unlock()
	w.cfg.Metrics.added(w.cfg.Name, len(keys), w.queue.Len())
}

// AddAfter marks k dirty once d has passed.
func (w *Worker[K]) AddAfter(k K, d time.Duration) { w.queue.AddAfter(k, d) }

// Len is the number of dirty keys waiting.
func (w *Worker[K]) Len() int { return w.queue.Len() }

// Idle reports whether no key waits or is being synced.
func (w *Worker[K]) Idle() bool { return w.queue.Len() == 0 && w.busy.Load() == 0 }

// Stats returns the counters so far.
func (w *Worker[K]) Stats() WorkerStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// StuckBound is how long one sync may run before liveness fails: far
// beyond any sync measured (a first sync of 10,000 services takes well
// under a second), short enough that a wedged process is restarted.
const StuckBound = 3 * time.Minute

// Stuck returns an error when one sync has been running for longer than
// bound (a liveness check).
func (w *Worker[K]) Stuck(bound time.Duration) error {
	if s := w.started.Load(); s != 0 {
		if d := time.Since(time.Unix(0, s)); d > bound {
			return fmt.Errorf("%s: a sync has been running for %s (bound %s)", w.cfg.Name, d.Round(time.Second), bound)
		}
	}
	return nil
}

// Failing returns an error when some key's syncs have all failed for
// longer than bound (a readiness check: the component runs but cannot
// reach what it is asked for), naming how many keys and the longest
// failing one's last error.
func (w *Worker[K]) Failing(bound time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	var oldest failure
	var key K
	for k, f := range w.failing {
		if time.Since(f.since) <= bound {
			continue
		}
		if n++; n == 1 || f.since.Before(oldest.since) {
			oldest, key = f, k
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d key(s) failing for over %s; %v failing since %s: %w",
		w.cfg.Name, n, bound, key, oldest.since.UTC().Format(time.RFC3339), oldest.err)
}

// Run drains the queue until ctx ends, then shuts it down and returns once
// the sync in progress has.
func (w *Worker[K]) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for w.next(ctx) {
	}
	w.queue.ShutDown()
}

// Hold counts work done outside the queue (a start-up pass before Run) as
// in progress, for Idle, until release is called.
func (w *Worker[K]) Hold() (release func()) {
	w.busy.Add(1)
	return func() { w.busy.Add(-1) }
}

// Retry counts and logs the failure of a key synced outside the queue and
// requeues it with backoff, as the worker does with its own.
func (w *Worker[K]) Retry(ctx context.Context, k K, err error) {
	if w.failed(ctx, k, err) {
		w.queue.AddRateLimited(k)
	}
}

// next takes the next dirty key and every other key dirty by then (after
// the window), syncs them, and requeues each failed key rate-limited.
func (w *Worker[K]) next(ctx context.Context) bool {
	first, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	w.busy.Add(1)
	keys := []K{first}
	if w.cfg.Window != nil {
		if d := w.cfg.Window(); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
	if d, open := w.cfg.Gate.Wait(ctx, w.cfg.GateBound); !open && ctx.Err() == nil {
		w.log.WithField("waited", d.Round(time.Millisecond)).Debug("gate still closed after its bound; syncing anyway")
	}
	w.adding.Lock()
	for w.queue.Len() > 0 && len(keys) < w.cfg.MaxBatch {
		k, shutdown := w.queue.Get()
		if shutdown {
			break
		}
		w.busy.Add(1)
		keys = append(keys, k)
	}
	w.adding.Unlock()
	w.cfg.Metrics.depth(w.cfg.Name, w.queue.Len())
	errs := w.run(ctx, keys)
	for _, k := range keys {
		w.finish(ctx, k, errs[k])
		w.busy.Add(-1)
	}
	return true
}

// run calls the SyncFunc and returns each key's error; a batch that fails
// as a whole is retried key by key.
func (w *Worker[K]) run(ctx context.Context, keys []K) map[K]error {
	err := w.call(ctx, keys)
	if err == nil {
		return nil
	}
	var per KeyErrors[K]
	if errors.As(err, &per) {
		return per
	}
	out := make(map[K]error, len(keys))
	if len(keys) == 1 || ctx.Err() != nil {
		for _, k := range keys {
			out[k] = err
		}
		return out
	}
	w.log.WithError(err).WithField("keys", len(keys)).Info("batch failed; retrying key by key")
	for _, k := range keys {
		if e := w.call(ctx, []K{k}); e != nil {
			if errors.As(e, &per) {
				e = per[k]
			}
			out[k] = e
		}
	}
	return out
}

func (w *Worker[K]) call(ctx context.Context, keys []K) error {
	start := time.Now()
	w.started.Store(start.UnixNano())
	err := w.sync(ctx, keys)
	w.started.Store(0)
	w.mu.Lock()
	w.stats.Syncs++
	w.mu.Unlock()
	w.cfg.Metrics.synced(w.cfg.Name, time.Since(start), err)
	return err
}

func (w *Worker[K]) finish(ctx context.Context, k K, err error) {
	defer w.queue.Done(k)
	w.mu.Lock()
	if err == nil {
		delete(w.failing, k)
	} else if ctx.Err() == nil {
		if w.failing == nil {
			w.failing = map[K]failure{}
		}
		f, ok := w.failing[k]
		if !ok {
			f.since = time.Now()
		}
		f.err = err
		w.failing[k] = f
	}
	w.mu.Unlock()
	if err == nil {
		w.queue.Forget(k)
		return
	}
	if w.failed(ctx, k, err) {
		w.queue.AddRateLimited(k)
	}
}

// failed counts a key's failure and logs it; it reports whether to retry
// the key (not when the worker is stopping: every key is enqueued again at
// the next start).
func (w *Worker[K]) failed(ctx context.Context, k K, err error) bool {
	w.mu.Lock()
	w.stats.Errors++
	w.mu.Unlock()
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false
	}
	w.cfg.Metrics.retried(w.cfg.Name)
	w.log.WithError(err).WithField("key", fmt.Sprint(k)).WithField("retries", w.queue.NumRequeues(k)).Warn("sync failed; requeued")
	return true
}
