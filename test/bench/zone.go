package main

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	kubefake "k8s.io/client-go/kubernetes/fake"

	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/zone"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// zoneIndex is the node whose interconnect zone the zone scenario
// translates: node1, which hosts the world's services 0, K, 2K, …: at the
// envelope two services of 600 endpoints, the busiest share a zone gets.
const zoneIndex = 0

// runZone (issue 18 item 1, interconnect): every node is its own zone with
// its own NB, and the node agent translates its zone (ovn-egress node
// --zone, package zone) from the whole cluster's objects. One zone's agent,
// the product's zone.Translator in process, its informers fed directly,
// converges the zone's NB (its node, and a remote transit port and route
// for every other node) against the same rows in one raw transaction; then
// endpoint changes of its own pods (timed to NB and SB, northd recomputes
// counted), changes elsewhere in the cluster (which must cost the zone no
// NB write), a full resync and a restart (no NB write either), and the Go
// heap the translator holds.
func (b *bench) runZone(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 40*time.Minute)
	defer cancel()
	w := b.w
	name := w.nodeName(zoneIndex)
	lay := w.zoneLayout(name)
	objs := w.objects(true)
	for i, n := range lay.topo.Nodes {
		objs.nodes[i] = lay.topo.NodeObject(n)
	}
	cfg := w.config(translate.BackendHost)
	in := translate.InputFromObjects(cfg, objs.translateObjects())
	in.Zone = name
	d := egressservice.Translate(in)
	want := indexDesired(d)
	c := countRows(d)
	r.metric("zone: nodes in the cluster (one zone each)", float64(len(lay.topo.Nodes)), "nodes")
	r.metric("zone rows: address sets", float64(c.AddressSets), "rows")
	r.metric("zone rows: addresses in them", float64(c.Addresses), "addresses")
	r.metric("zone rows: router policies", float64(c.Policies), "rows")
	local := 0
	for s := 0; s < w.size.Services; s++ {
		for j := 0; j < w.size.endpointsOf(s); j++ {
			if _, n := w.endpoint(s, j); n == zoneIndex {
				local++
			}
		}
	}
	r.metric("zone: endpoints on the zone's node", float64(local), "endpoints")

	b.step("zone %s: its NB (1 local node, %d remote transit ports and routes)", name, len(lay.topo.Nodes)-1)
	env, err := startLayout(ctx, w, lay, true)
	if err != nil {
		return err
	}
	defer env.stop()
	l := &loaded{env: env, cfg: cfg, d: d, want: want}
	start := time.Now()
	l.kube = kubefake.NewSimpleClientset(objs.kubeObjects()...)
	l.egress = egressfake.NewSimpleClientset(objs.egressObjects()...)
	l.fill = time.Since(start)
	l.mark = env.nbLog().mark()
	env.sb.markBase()
	z, err := b.startZone(ctx, l, name)
	if err != nil {
		return err
	}
	defer func() { z.stop() }()
	lctx, lcancel := within(ctx, 10*time.Minute)
	if l.nbDone, err = env.nb.wait(lctx, "zone NB to hold every desired row", env.nb.complete(want)); err == nil {
		l.sbDone, err = env.sb.wait(lctx, "zone SB to reflect every desired row", env.sb.complete(want))
	}
	lcancel()
	if err != nil {
		return err
	}
	if _, err := z.waitIdle(ctx); err != nil {
		return err
	}
	st := z.t.Translation().Stats()
	// The restart below starts a new translator: keep the first one's times.
	toNB, list := l.nbDone.Sub(z.synced), z.synced.Sub(z.started)
	r.seconds("zone agent: fill the fake clientsets", l.fill)
	r.seconds("zone agent: NB connect + informer list (start → synced)", list)
	r.seconds("zone agent: informers synced → zone NB complete", toNB)
	r.seconds("zone agent: informers synced → zone SB complete", l.sbDone.Sub(z.synced))
	r.metric("zone agent: NB transactions", float64(st.Transactions), "transactions")

	if err := b.zoneChurn(ctx, r, l, z, name); err != nil {
		return err
	}
	if err := b.zoneSteady(ctx, r, l, z); err != nil {
		return err
	}
	z.stop()

	lim, err := b.zoneLimit(ctx, r, lay, d, want)
	if err != nil {
		return err
	}
	translationCheck(r, "zone translation: synced → zone NB complete (informers fed directly)", toNB, lim, list)
	return nil
}

// zoneLimit writes the zone's rows in one raw transaction on a fresh zone NB.
func (b *bench) zoneLimit(ctx context.Context, r *result, lay layout, d *translate.Desired, want wantIndex) (rawWrite, error) {
	b.step("limit: the zone's rows in one raw transaction on a fresh zone NB")
	env, err := startLayout(ctx, b.w, lay, true)
	if err != nil {
		return rawWrite{}, err
	}
	defer env.stop()
	ops, err := ourOps(d)
	if err != nil {
		return rawWrite{}, err
	}
	lim, err := writeRawWatched(ctx, env, ops, env.nb.complete(want), env.sb.complete(want))
	if err != nil {
		return lim, wrap("zone limit", err)
	}
	r.metric("zone limit: operations in the one raw transaction", float64(lim.ops), "operations")
	r.seconds("zone limit: raw transaction committed", lim.commit)
	r.seconds("zone limit: raw transaction → SB complete", lim.visible)
	return lim, nil
}

// zoneChurn: endpoint changes of pods on the zone's node, for services
// hosted in other zones (the zone reroutes its own pods to the host's
// transit address), one at a time, timed until the zone's NB and SB have
// them; then as many changes of pods on other nodes, for services hosted
// elsewhere, which must not write the zone's NB at all.
func (b *bench) zoneChurn(ctx context.Context, r *result, l *loaded, z *zoneStack, name string) error {
	w, env := b.w, l.env
	sets, err := w.hostSets(l.d, translate.BackendHost) // host → its set's name (the same in every zone)
	if err != nil {
		return err
	}
	n := b.opts.churn
	localChs, remoteChs := w.zoneChanges(n, zoneIndex, func(host string) bool { _, ok := l.want.sets[sets[host]]; return ok })
	if len(localChs) < 3 {
		return fmt.Errorf("no service hosted elsewhere has a pod on %s", name)
	}
	env.settle()
	if err := env.clearEngine(); err != nil {
		return err
	}
	b.step("zone: %d changes of the zone's own pods, one at a time", len(localChs))
	mark := env.nbLog().mark()
	var res churnResult
	for _, c := range localChs {
		nbConds, sbConds := changeConds(env, sets, w.nodeName(w.host(c.svc)), c, false, "")
		if err := res.time(ctx, env, c.kind+" (zone)", func(ctx context.Context) error { return l.applySlice(ctx, w, c) }, nbConds, sbConds); err != nil {
			return err
		}
	}
	if err := b.churnCounters(env, mark, &res); err != nil {
		return err
	}
	r.metric("zone churn: changes of the zone's own pods", float64(len(res.nb)), "changes")
	r.seconds("zone churn: one change → zone NB, p50", res.nb.pct(0.5))
	r.seconds("zone churn: one change → zone NB, p99", res.nb.pct(0.99))
	r.seconds("zone churn: one change → zone SB, p50", res.sb.pct(0.5))
	r.seconds("zone churn: one change → zone SB, p99", res.sb.pct(0.99))
	r.check("zone: one change of its own pods → its NB, p99", res.nb.pct(0.99).Seconds(), "s", "<", 0.05,
		ms(res.nb.pct(0.99)), "< 50 ms")
	r.check("zone: northd recomputes under its own pods' churn", float64(res.northd+res.lflow), "recomputes", "==", 0,
		fmt.Sprintf("%d northd, %d lflow", res.northd, res.lflow), "0")
	r.check("zone: router policy writes under its own pods' churn", float64(res.policyWrites), "transactions", "==", 0,
		fmt.Sprint(res.policyWrites), "0")

	b.step("zone: %d changes of pods on other nodes, for services hosted in other zones", len(remoteChs))
	mark = env.nbLog().mark()
	syncs0 := z.t.Translation().Stats().Syncs
	for _, c := range remoteChs {
		if err := l.applySlice(ctx, w, c); err != nil {
			return err
		}
		if _, err := z.waitIdle(ctx); err != nil {
			return err
		}
	}
	env.settle()
	tx, err := env.nbLog().since(mark)
	if err != nil {
		return err
	}
	r.metric("zone: syncs for changes elsewhere", float64(z.t.Translation().Stats().Syncs-syncs0), "syncs")
	r.check("zone: NB writes for changes elsewhere in the cluster", float64(tx.Transactions), "transactions", "==", 0,
		fmt.Sprintf("%d for %d changes", tx.Transactions, len(remoteChs)), "0")
	return nil
}

// zoneChanges plans n changes of pods on node zi (add, move, remove on one
// service, then the next) for services hosted on another node that already
// has the zone's set (hasSet), and n changes of pods on other nodes for
// services hosted neither on zi nor with a pod on it.
func (w *world) zoneChanges(n, zi int, hasSet func(host string) bool) (local, remote []change) {
	var inZone, elsewhere []int
	for s := 0; s < w.size.Services; s++ {
		if w.host(s) == zi {
			continue
		}
		has := false
		for j := 0; j < w.size.endpointsOf(s) && !has; j++ {
			_, node := w.endpoint(s, j)
			has = node == zi
		}
		if has && hasSet(w.nodeName(w.host(s))) {
			inZone = append(inZone, s)
		} else if !has {
			elsewhere = append(elsewhere, s)
		}
	}
	plan := func(svcs []int, node func(i int) int) []change {
		var out []change
		var cur change
		for i := 0; i < n && len(svcs) > 0; i++ {
			s := svcs[(i/3*7919)%len(svcs)]
			switch i % 3 {
			case 0:
				nd := node(i)
				cur = change{kind: "add", svc: s, node: nd, add: w.newPod(nd)}
				out = append(out, cur)
			case 1:
				nd := node(i)
				next := change{kind: "move", svc: s, node: nd, add: w.newPod(nd), del: cur.add}
				out = append(out, next)
				cur = next
			default:
				out = append(out, change{kind: "remove", svc: s, del: cur.add})
			}
		}
		return out
	}
	local = plan(inZone, func(int) int { return zi })
	remote = plan(elsewhere, func(i int) int { return (zi + 1 + i*31) % w.size.Nodes })
	return local, remote
}

// zoneSteady: a full resync and a restart of the zone's translator with
// nothing changed must not write the zone's NB.
func (b *bench) zoneSteady(ctx context.Context, r *result, l *loaded, z *zoneStack) error {
	env := l.env
	env.settle()
	mark := env.nbLog().mark()
	start := time.Now()
	z.t.Translation().EnqueueAll()
	done, err := z.waitIdle(ctx)
	if err != nil {
		return err
	}
	env.settle()
	tx, err := env.nbLog().since(mark)
	if err != nil {
		return err
	}
	r.seconds("zone: full resync → idle", done.Sub(start))
	r.check("zone: full resync with nothing changed: NB writes", float64(tx.Transactions), "transactions", "==", 0, fmt.Sprint(tx.Transactions), "0")

	b.step("zone: restarting the zone's translator")
	z.stop()
	// The agent's heap is the live heap with the restarted translator
	// converged minus the live heap just before it started: the bench's own
	// NB and SB mirrors are full in both. (The heap added since the first
	// start counted the mirrors' growth as the agent's; and a stopped
	// translator stays reachable — libovsdb v0.8.1 leaves a goroutine per
	// closed leader-only client that holds it — so it cannot be measured
	// as the heap freed by stopping one.)
	base := liveHeapMiB()
	mark = env.nbLog().mark()
	nz, err := b.startZone(ctx, l, z.name)
	if err != nil {
		return err
	}
	*z = *nz
	conv, err := z.waitIdle(ctx)
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	env.settle()
	if tx, err = env.nbLog().since(mark); err != nil {
		return err
	}
	with := liveHeapMiB()
	if err := writeHeapProfile(b.opts.heapProfile); err != nil {
		return err
	}
	r.metric("zone agent: Go heap held (live, after GC) by its informers and caches", with-base, "MiB")
	r.note("the zone agent runs in the bench's process: its memory is the live Go heap it adds (after a GC), not a process RSS; " +
		"every node runs one, and each holds the whole cluster's EgressServices, Services, EndpointSlices and Nodes")
	r.seconds("zone: restart → converged (idle)", conv.Sub(z.started))
	r.check("zone: restart with nothing changed: NB writes", float64(tx.Transactions), "transactions", "==", 0, fmt.Sprint(tx.Transactions), "0")
	return nil
}

// zoneStack is a running zone.Translator.
type zoneStack struct {
	name            string
	t               *zone.Translator
	started, synced time.Time
	cancel          context.CancelFunc
	done            chan error
}

// startZone starts the product's zone translator on l's fake clientsets and
// the zone's NB, as ovn-egress node --zone runs it, with the bench's
// translation config (agents taken as ready), and waits for its caches.
func (b *bench) startZone(ctx context.Context, l *loaded, name string) (*zoneStack, error) {
	z := &zoneStack{name: name, started: time.Now(), done: make(chan error, 1)}
	cfg := zone.Config{NB: ovn.ClientConfig{Addresses: []string{l.env.o.NBAddress()}}, Node: name, ReportNamespace: "ovn-egress",
		Translation: translation.Config{Translate: l.cfg, Zone: name}}
	log := b.log.WithField("zone", name)
	t, err := zone.New(ctx, cfg, zone.Clients{Kube: l.kube, Egress: l.egress}, log)
	if err != nil {
		return nil, wrap("zone translator", err)
	}
	z.t = t
	cctx, cancel := context.WithCancel(ctx)
	z.cancel = cancel
	go func() { z.done <- t.Run(cctx) }()
	for !t.Translation().Synced() {
		select {
		case err := <-z.done:
			z.done <- err
			z.stop()
			return nil, fmt.Errorf("the zone translator stopped before its caches synced: %w", err)
		case <-time.After(time.Millisecond):
		}
	}
	z.synced = time.Now()
	return z, nil
}

// waitIdle waits until the translator has synced at least once and has
// nothing queued or in flight.
func (z *zoneStack) waitIdle(ctx context.Context) (time.Time, error) {
	for {
		if z.t.Translation().Stats().Syncs > 0 && z.t.Translation().Idle() {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for the zone translator: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (z *zoneStack) stop() {
	if z.cancel == nil {
		return
	}
	z.cancel()
	<-z.done
	z.t.Close()
	z.cancel = nil
}

// writeHeapProfile writes the heap profile to path (none when empty).
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-heapprofile: %w", err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("-heapprofile: %w", err)
	}
	return nil
}

// liveHeapMiB is the Go heap still reachable after a full collection.
func liveHeapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}
