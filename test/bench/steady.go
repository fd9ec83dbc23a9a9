package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// resyncInterval is the steady scenario's --resync-interval: short, so a
// full resync happens within the run.
const resyncInterval = 2 * time.Second

// runSteady (issue 8 scenario 3): with N loaded and nothing changing, a
// full resync and a master restart must write nothing to NB; how long each
// takes to declare convergence.
func (b *bench) runSteady(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 20*time.Minute)
	defer cancel()
	l, err := b.loadFake(ctx, translate.BackendHost, resyncInterval)
	if err != nil {
		return err
	}
	defer l.stop()
	r.seconds("load: informers synced → NB complete", l.nbDone.Sub(l.st.synced))

	// A full resync: every key re-synced from the listers and the NB cache.
	b.step("waiting for a full resync")
	if _, err := l.st.waitConverged(ctx); err != nil {
		return err
	}
	l.env.settle()
	mark := l.env.nbLog().mark()
	before := l.st.sync.Stats()
	busy, done, err := waitResync(ctx, l.st, before.Syncs)
	if err != nil {
		return err
	}
	after := l.st.sync.Stats()
	l.env.settle()
	tx, err := l.env.nbLog().since(mark)
	if err != nil {
		return err
	}
	if done.After(busy) {
		r.seconds("full resync: first seen busy → converged (idle)", done.Sub(busy))
	} else {
		r.note("the full resync was never seen busy when polling every 200 µs: it took less than the polling granularity")
	}
	r.metric("full resync: syncs", float64(after.Syncs-before.Syncs), "syncs")
	r.metric("full resync: NB transactions (controller)", float64(after.Transactions-before.Transactions), "transactions")
	r.metric("full resync: NB transactions (NB log)", float64(tx.Transactions), "transactions")
	r.check("full resync with nothing changed: NB writes", float64(tx.Transactions), "transactions", "==", 0,
		fmt.Sprintf("%d (controller: %d)", tx.Transactions, after.Transactions-before.Transactions), "0")

	// A restart: a new master (new NB connection and cache, new informers)
	// over the same cluster and NB.
	b.step("restarting the master")
	if err := l.st.stop(); err != nil {
		return err
	}
	l.st = nil
	mark = l.env.nbLog().mark()
	st, err := b.startFakeStack(ctx, l, 0)
	if err != nil {
		return err
	}
	l.st = st
	conv, err := st.waitConverged(ctx)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	l.env.settle()
	tx, err = l.env.nbLog().since(mark)
	if err != nil {
		return err
	}
	stats := st.sync.Stats()
	r.seconds("restart: start → NB connected", st.connected.Sub(st.started))
	r.seconds("restart: start → informers synced", st.synced.Sub(st.started))
	r.seconds("restart: informers synced → converged (idle)", conv.Sub(st.synced))
	r.seconds("restart: start → converged", conv.Sub(st.started))
	r.metric("restart: NB transactions (controller)", float64(stats.Transactions), "transactions")
	r.metric("restart: NB transactions (NB log, 1 s after converged)", float64(tx.Transactions), "transactions")
	r.check("master restart with nothing changed: NB writes", float64(tx.Transactions), "transactions", "==", 0,
		fmt.Sprintf("%d (controller: %d)", tx.Transactions, stats.Transactions), "0")
	return nil
}

// waitResync waits for the next periodic resync: from the moment the
// controller is seen busy to the moment it is idle again with more syncs
// than before, polling every 200 µs.
func waitResync(ctx context.Context, st *stack, syncs int) (busy, done time.Time, err error) {
	ctx, cancel := within(ctx, 5*resyncInterval)
	defer cancel()
	for {
		now := time.Now()
		idle := st.sync.Idle()
		if !idle && busy.IsZero() {
			busy = now
		}
		if idle && st.sync.Stats().Syncs > syncs {
			if busy.IsZero() {
				busy = now // never seen busy
			}
			return busy, now, nil
		}
		select {
		case <-ctx.Done():
			return busy, done, fmt.Errorf("waiting for a resync: %w", ctx.Err())
		case <-time.After(200 * time.Microsecond):
		}
	}
}
