package main

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// runConverge (issue 8 scenario 1): from an empty NB with hosts known, the
// master translates every service — fed directly (fake clientsets) and as
// the real binary against the real API server — against the limit (the
// same rows in one raw transaction, no cache, on a fresh NB) and the peer
// shape (one policy per endpoint, written the same way); northd's
// catch-up for each.
func (b *bench) runConverge(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 30*time.Minute)
	defer cancel()
	l, err := b.convergeFake(ctx, r, translate.BackendHost, "")
	if err != nil {
		return err
	}
	l.stop()
	b.timeTranslate(r)
	lim, err := b.limitWrite(ctx, r, l, "")
	if err != nil {
		return err
	}
	translationCheck(r, "translation: synced → NB complete (informers fed directly)",
		l.nbDone.Sub(l.st.synced), lim, l.st.synced.Sub(l.st.connected))

	peer, err := b.peerWrite(ctx, r)
	if err != nil {
		return err
	}
	rt := ratio(peer.visible.Seconds(), lim.visible.Seconds())
	r.check("northd convergence vs the peer shape (raw write → SB complete)", rt, "×", ">=", 10,
		fmt.Sprintf("%s vs %s = %s", sec(peer.visible), sec(lim.visible), times(rt)), "≥ 10× faster")

	return b.convergeBinary(ctx, r, lim)
}

// peerWrite loads the peer shape on a fresh NB the limit's way and
// returns the write; the environment is stopped.
func (b *bench) peerWrite(ctx context.Context, r *result) (rawWrite, error) {
	env, err := startOVN(ctx, b.w, false)
	if err != nil {
		return rawWrite{}, err
	}
	defer env.stop()
	return b.loadPeer(ctx, r, env)
}

// loadPeer writes the peer shape into env with one raw transaction.
func (b *bench) loadPeer(ctx context.Context, r *result, env *ovnEnv) (rawWrite, error) {
	b.step("peer shape: one policy per endpoint, one raw transaction on a fresh NB")
	ops, err := b.w.peerOps()
	if err != nil {
		return rawWrite{}, err
	}
	n := b.w.size.total()
	peer, err := writeRaw(ctx, env, ops, env.sb.flowsAtLeast(stagePolicy, n))
	if err != nil {
		return peer, wrap("peer shape", err)
	}
	r.metric("peer: router policies (one per endpoint)", float64(n), "rows")
	r.seconds("peer: raw transaction committed", peer.commit)
	r.seconds("peer: raw transaction → SB complete", peer.visible)
	r.seconds("peer: northd catch-up after the commit", peer.visible-peer.commit)
	r.Details["peer_rss_mib"] = peer.rss
	return peer, nil
}

// timeTranslate times the pure translation of every service (what a sync
// touching every host costs before any I/O), best of three.
func (b *bench) timeTranslate(r *result) {
	in := translate.InputFromObjects(b.w.config(translate.BackendHost), b.w.objects(true).translateObjects())
	best := time.Duration(1 << 62)
	for i := 0; i < 3; i++ {
		start := time.Now()
		egressservice.Translate(in)
		best = min(best, time.Since(start))
	}
	r.seconds("translate.Translate of every service (pure, in-process, best of 3)", best)
}
