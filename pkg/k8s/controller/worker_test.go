package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
)

func quiet() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// recorder is a SyncFunc that remembers every call and fails as told.
type recorder struct {
	mu    sync.Mutex
	calls [][]string
	fail  func(keys []string) error
}

func (r *recorder) sync(_ context.Context, keys []string) error {
	r.mu.Lock()
	r.calls = append(r.calls, slices.Clone(keys))
	f := r.fail
	r.mu.Unlock()
	if f != nil {
		return f(keys)
	}
	return nil
}

func (r *recorder) snapshot() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func fastRetry() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWorkerBatchesAndRetriesKeyByKey: keys dirty within the window are
// synced together; a batch failing as a whole is retried key by key, so
// only the bad key is requeued (with backoff) while the others are done.
func TestWorkerBatchesAndRetriesKeyByKey(t *testing.T) {
	r := &recorder{}
	var badTries atomic.Int32
	r.fail = func(keys []string) error {
		if slices.Contains(keys, "bad") {
			if len(keys) == 1 {
				if badTries.Add(1) >= 3 {
					return nil // heals on its third try alone
				}
			}
			return errors.New("refused")
		}
		return nil
	}
	reg := prometheus.NewRegistry()
	m := controller.NewMetrics(reg)
	w := controller.New(controller.Config[string]{Name: "t", MaxBatch: 10, Window: func() time.Duration { return 50 * time.Millisecond },
		RateLimiter: fastRetry(), Metrics: m}, r.sync, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	w.Add("a", "bad", "b")
	waitFor(t, "the bad key healed", func() bool { return badTries.Load() >= 3 && w.Idle() })
	calls := r.snapshot()
	if len(calls[0]) != 3 {
		t.Fatalf("first sync %v: want the three keys of the window together", calls[0])
	}
	// Then each key alone, then "bad" twice more on its own.
	var alone []string
	for _, c := range calls[1:] {
		if len(c) != 1 {
			t.Fatalf("retry synced %v together: want key by key", c)
		}
		alone = append(alone, c[0])
	}
	slices.Sort(alone)
	if want := []string{"a", "b", "bad", "bad", "bad"}; !slices.Equal(alone, want) {
		t.Errorf("single-key syncs %v, want %v", alone, want)
	}
	if st := w.Stats(); st.Errors != 2 || st.Syncs != len(calls) {
		t.Errorf("stats %+v: want 2 errors (bad's first two single tries), %d syncs", st, len(calls))
	}
	if v := counterSum(t, reg, "ovn_egress_controller_retries_total"); v != 2 {
		t.Errorf("retries metric %v, want 2", v)
	}
	cancel()
	<-done
}

// TestWorkerTakesKeysAddedTogether: the keys of one Add are one batch
// even without a window, however soon the worker wakes on the first (a
// drained host's EgressServices are decided and written at once).
func TestWorkerTakesKeysAddedTogether(t *testing.T) {
	for range 20 {
		r := &recorder{}
		w := controller.New(controller.Config[string]{Name: "t", MaxBatch: 10000}, r.sync, quiet())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		keys := make([]string, 2000)
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
		}
		w.Add(keys...)
		waitFor(t, "synced", w.Idle)
		cancel()
		<-done
		if calls := r.snapshot(); len(calls) != 1 || len(calls[0]) != len(keys) {
			t.Fatalf("%d syncs (the first of %d keys); want the %d keys of one Add in one sync", len(calls), len(calls[0]), len(keys))
		}
	}
}

// TestWorkerKeyErrors: a SyncFunc naming its failed keys gets exactly those
// back, without a key-by-key pass.
func TestWorkerKeyErrors(t *testing.T) {
	r := &recorder{}
	var once sync.Once
	r.fail = func(keys []string) error {
		var err error
		once.Do(func() { err = controller.KeyErrors[string]{"y": errors.New("no")} })
		return err
	}
	w := controller.New(controller.Config[string]{Name: "t", MaxBatch: 10, Window: func() time.Duration { return 20 * time.Millisecond },
		RateLimiter: fastRetry()}, r.sync, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	w.Add("x", "y")
	waitFor(t, "two syncs", func() bool { return len(r.snapshot()) >= 2 && w.Idle() })
	calls := r.snapshot()
	if len(calls) != 2 || len(calls[0]) != 2 || !slices.Equal(calls[1], []string{"y"}) {
		t.Errorf("syncs %v: want [x y] then [y]", calls)
	}
}

// TestWorkerStopsWithoutRequeue: a sync failing because the worker stops
// is not requeued (every key is enqueued again at the next start), and Run
// returns once it did.
func TestWorkerStopsWithoutRequeue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	w := controller.New(controller.Config[string]{Name: "t", RateLimiter: fastRetry()},
		func(ctx context.Context, _ []string) error {
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		}, quiet())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	w.Add("k")
	<-entered
	if err := w.Stuck(time.Hour); err != nil {
		t.Errorf("Stuck(1h) after a moment: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := w.Stuck(10 * time.Millisecond); err == nil {
		t.Errorf("a sync running 20 ms is not reported stuck past 10 ms")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if w.Len() != 0 {
		t.Errorf("%d keys requeued after the stop", w.Len())
	}
	if err := w.Stuck(time.Nanosecond); err != nil {
		t.Errorf("Stuck after the sync returned: %v", err)
	}
}

// counterSum adds a counter's values over its labels.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestWaitSynced: returns once every cache has synced, and fails when ctx
// ends before.
func TestWaitSynced(t *testing.T) {
	var n atomic.Int32
	later := func() bool { return n.Add(1) > 3 }
	if err := controller.WaitSynced(context.Background(), func() bool { return true }, later); err != nil {
		t.Fatalf("synced caches: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := controller.WaitSynced(ctx, func() bool { return false }); err == nil {
		t.Fatal("a cache that never syncs: no error")
	}
}

// TestBoundedStop: a stop that blocks is waited for only so long.
func TestBoundedStop(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	start := time.Now()
	controller.BoundedStop(func() { <-block }, 50*time.Millisecond)()
	if d := time.Since(start); d > time.Second {
		t.Errorf("a blocked stop held the caller %v", d)
	}
	ran := false
	controller.BoundedStop(func() { ran = true }, time.Second)()
	if !ran {
		t.Error("a quick stop did not run before the caller went on")
	}
}

// TestWorkerWaitsForTheGate: keys dirtied while another controller holds
// the gate closed are synced in one batch once it opens; a gate left
// closed holds the worker no longer than its bound.
func TestWorkerWaitsForTheGate(t *testing.T) {
	r := &recorder{}
	gate := &controller.Gate{}
	w := controller.New(controller.Config[string]{Name: "t", MaxBatch: 100, Gate: gate, GateBound: time.Minute}, r.sync, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	open := gate.Close()
	for _, k := range []string{"a", "b", "c"} {
		w.Add(k)
		time.Sleep(5 * time.Millisecond) // echoes arriving one by one
	}
	if calls := r.snapshot(); len(calls) != 0 {
		t.Fatalf("synced while the gate was closed: %v", calls)
	}
	open()
	open() // a second call does nothing
	waitFor(t, "the batch", func() bool { return w.Idle() && len(r.snapshot()) > 0 })
	if calls := r.snapshot(); len(calls) != 1 || !slices.Equal(calls[0], []string{"a", "b", "c"}) {
		t.Fatalf("calls %v; want one sync of a, b, c", calls)
	}

	// Left closed: the bound lets the worker go on.
	w2r := &recorder{}
	w2 := controller.New(controller.Config[string]{Name: "t2", MaxBatch: 100, Gate: gate, GateBound: 30 * time.Millisecond}, w2r.sync, quiet())
	go w2.Run(ctx)
	_ = gate.Close() // never opened
	start := time.Now()
	w2.Add("x")
	waitFor(t, "the bounded wait", func() bool { return len(w2r.snapshot()) == 1 })
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("synced after %v, before the gate's bound", d)
	}
	var nilGate *controller.Gate
	if d, open := nilGate.Wait(ctx, time.Hour); d != 0 || !open {
		t.Fatalf("a nil gate waited %v, open %v", d, open)
	}
}

// TestWorkerFailing: a key whose syncs keep failing makes Failing report
// it (with its last error) once the bound has passed, not before; one
// success clears it.
func TestWorkerFailing(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	w := controller.New(controller.Config[string]{Name: "node", RateLimiter: fastRetry()},
		func(context.Context, []string) error {
			if broken.Load() {
				return errors.New("resolve networks: boom")
			}
			return nil
		}, quiet())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	w.Add("k")
	waitFor(t, "a failed sync", func() bool { return w.Stats().Errors >= 1 })
	if err := w.Failing(time.Hour); err != nil {
		t.Errorf("Failing(1h) right after the first failure: %v", err)
	}
	waitFor(t, "failing for 50ms", func() bool { return w.Failing(50*time.Millisecond) != nil })
	if err := w.Failing(50 * time.Millisecond); !strings.Contains(err.Error(), "node: 1 key(s) failing") || !strings.Contains(err.Error(), "resolve networks: boom") {
		t.Errorf("Failing = %v; want the key count and its last error", err)
	}
	broken.Store(false)
	waitFor(t, "the failure cleared by a success", func() bool { return w.Failing(0) == nil && w.Idle() })
}
