package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// runGateway (issue 8 scenario 6): the gateway backend (--snat-backend=ovn,
// one NAT row per endpoint on the host's GR, --nat-batch-window 1 s) through
// converge, churn and failover again, and the recompute rate northd is
// held to under sustained churn.
func (b *bench) runGateway(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 40*time.Minute)
	defer cancel()
	const p = "gateway: "
	l, err := b.convergeFake(ctx, r, translate.BackendOVN, p)
	if err != nil {
		return err
	}
	r.Details[p+"rss_mib_after_converge"] = l.env.daemonRSS()
	r.seconds(p+"converge: SB complete after NB complete", l.sbDone.Sub(l.nbDone))

	chs := b.w.changes(b.opts.peerChurn)
	one, err := b.churnOurs(ctx, l, chs)
	if err != nil {
		l.stop()
		return wrap("gateway churn", err)
	}
	one.report(r, p+"churn one at a time: ", len(chs))

	err = b.sustained(ctx, r, l, p)
	l.stop()
	if err != nil {
		return wrap("gateway sustained churn", err)
	}
	lim, err := b.limitWrite(ctx, r, l, p)
	if err != nil {
		return err
	}
	took := l.nbDone.Sub(l.st.synced)
	r.metric(p+"converge: master (synced → NB complete) / raw transaction", ratio(took.Seconds(), lim.commit.Seconds()), "×")
	r.metric(p+"converge: master (synced → NB complete, less the batch window) / raw transaction",
		ratio((took-l.batch).Seconds(), lim.commit.Seconds()), "×")

	if err := b.failover(ctx, r, translate.BackendOVN, p+"failover: ", false); err != nil {
		return wrap("gateway failover", err)
	}
	if b.w.natMatch {
		r.note("%sNB with NAT.match: one NAT row per service matching its address set; an endpoint change writes address sets only, and no batch window is used", p)
	} else {
		r.note("%severy NAT change costs ovn-northd 23.03 full recomputes (nb-shapes.md §3.3); the batch window trades per-change latency for fewer of them", p)
	}
	return nil
}

// sustained drives endpoint changes at -rate per second for -sustain,
// without waiting for each, then lets OVN settle, and reports northd's
// recomputes per second over the whole time (DESIGN §6: ≤ 2 per second
// with NAT batching).
func (b *bench) sustained(ctx context.Context, r *result, l *loaded, p string) error {
	env := l.env
	env.settle()
	if err := env.clearEngine(); err != nil {
		return err
	}
	mark := env.nbLog().mark()
	before := l.st.sync.Stats()
	chs := b.w.changes(int(b.opts.rate * b.opts.sustain.Seconds()))
	b.step("sustained churn: %.0f changes/s for %s", b.opts.rate, b.opts.sustain)
	start := time.Now()
	for i, c := range chs {
		next := start.Add(time.Duration(float64(i) / b.opts.rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		if err := l.applySlice(ctx, b.w, c); err != nil {
			return err
		}
	}
	driven := time.Since(start)
	last := chs[len(chs)-1]
	sets, err := b.w.hostSets(l.d, l.cfg.Backend)
	if err != nil {
		return err
	}
	nbDone, _ := changeConds(env, sets, b.w.nodeName(b.w.host(last.svc)), last, true, b.w.natSet(last))
	wctx, cancel := within(ctx, time.Minute)
	defer cancel()
	if _, err := env.nb.wait(wctx, "last change in NB", nbDone); err != nil {
		return err
	}
	l.env.settle()
	window := time.Since(start)
	eng, err := env.engine()
	if err != nil {
		return err
	}
	tx, err := env.nbLog().since(mark)
	if err != nil {
		return err
	}
	after := l.st.sync.Stats()
	nd, lf := eng["northd"].recompute, eng["lflow"].recompute
	perSec := float64(nd) / window.Seconds()
	r.metric(p+"sustained churn: changes", float64(len(chs)), "changes")
	r.seconds(p+"sustained churn: driving time", driven)
	r.seconds(p+"sustained churn: first change → OVN settled", window)
	r.metric(p+"sustained churn: NB transactions (controller)", float64(after.Transactions-before.Transactions), "transactions")
	r.metric(p+"sustained churn: NB transactions (NB log)", float64(tx.Transactions), "transactions")
	r.metric(p+"sustained churn: northd recomputes", float64(nd), "recomputes")
	r.metric(p+"sustained churn: lflow recomputes", float64(lf), "recomputes")
	r.metric(p+"sustained churn: northd recomputes per second", perSec, "1/s")
	r.check("gateway: northd recomputes per second under churn", perSec, "1/s", "<=", 2,
		fmt.Sprintf("%.2f/s (%d in %s at %.0f changes/s)", perSec, nd, sec(window), b.opts.rate), "≤ 2/s")
	return nil
}
