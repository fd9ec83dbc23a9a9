package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// loaded is an in-process master converged on the whole world, its
// informers fed by client-go's fake clientsets (no API server: at this
// scale the API server, not the master, would be what is measured), on a
// fresh OVN with the topology.
type loaded struct {
	env    *ovnEnv
	kube   *kubefake.Clientset
	egress *egressfake.Clientset
	st     *stack
	cfg    translate.Config
	batch  time.Duration
	d      *translate.Desired
	want   wantIndex
	// fill is how long filling the fake clientsets took; nbDone and sbDone
	// are when NB held every desired row and when the SB reflected them.
	fill           time.Duration
	nbDone, sbDone time.Time
	mark           int64 // NB log before the master started
	rv             int   // resourceVersions the bench gave its updates
}

// batchWindow is the master's default for a backend: the NAT batch window
// (1 s) with the ovn backend on an NB without NAT.match, none otherwise.
func (w *world) batchWindow(b translate.Backend) time.Duration {
	if b == translate.BackendOVN && !w.natMatch {
		return translation.DefaultNATBatchWindow
	}
	return 0
}

func (b *bench) loadFake(ctx context.Context, backend translate.Backend, resync time.Duration) (*loaded, error) {
	b.step("loading the in-process master (%s backend, informers fed directly)", backend)
	env, err := startOVN(ctx, b.w, true)
	if err != nil {
		return nil, err
	}
	objs := b.w.objects(true)
	l := &loaded{env: env, cfg: b.w.config(backend), batch: b.w.batchWindow(backend)}
	l.d = desired(l.cfg, objs)
	l.want = indexDesired(l.d)
	start := time.Now()
	l.kube = kubefake.NewSimpleClientset(objs.kubeObjects()...)
	l.egress = egressfake.NewSimpleClientset(objs.egressObjects()...)
	l.fill = time.Since(start)
	l.mark = env.nbLog().mark()
	env.sb.markBase()
	if l.st, err = b.startFakeStack(ctx, l, resync); err != nil {
		env.stop()
		return nil, err
	}
	lctx, cancel := within(ctx, 10*time.Minute)
	defer cancel()
	if l.nbDone, err = env.nb.wait(lctx, "NB to hold every desired row", env.nb.complete(l.want)); err == nil {
		l.sbDone, err = env.sb.wait(lctx, "SB to reflect every desired row", env.sb.complete(l.want))
	}
	if err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

// startFakeStack starts a master on l's fake clientsets and OVN.
func (b *bench) startFakeStack(ctx context.Context, l *loaded, resync time.Duration) (*stack, error) {
	return startStack(ctx, stackOpts{kube: l.kube, egress: l.egress, recorder: &record.FakeRecorder{},
		nbAddr: l.env.o.NBAddress(), cfg: l.cfg, batch: l.batch, resync: resync}, b.log)
}

func (l *loaded) stop() {
	if l.st != nil {
		_ = l.st.stop()
	}
	l.env.stop()
}

// hostSets maps every node to the name its reroute address set has (or
// would have, once it hosts a service): "a" + FNV-1a of the row id, the id
// being owner-controller, owner-type, host and family joined with ":"
// (DESIGN §3). The names of the sets d has are checked against it.
func (w *world) hostSets(d *translate.Desired, backend translate.Backend) (map[string]string, error) {
	owner := translate.OwnerHost
	if backend == translate.BackendOVN {
		owner = translate.OwnerGateway
	}
	out := map[string]string{}
	for _, n := range w.topo.Nodes {
		id := strings.Join([]string{translate.OwnerController, owner, n.Name, string(ipfamily.V4)}, ":")
		out[n.Name] = translate.AddressSetName(id)
	}
	for k, rows := range d.Rows {
		for _, as := range rows.AddressSets {
			if as.ExternalIDs[translate.KeyOwnerType] == owner && out[k.Node()] != as.Name {
				return nil, fmt.Errorf("address set of %s is %s, not %s: the naming changed", k.Node(), as.Name, out[k.Node()])
			}
		}
	}
	return out, nil
}

// converge measures the in-process master converging from an empty NB.
func (b *bench) convergeFake(ctx context.Context, r *result, backend translate.Backend, p string) (*loaded, error) {
	l, err := b.loadFake(ctx, backend, 0)
	if err != nil {
		return nil, err
	}
	st := l.st.sync.Stats()
	tx, err := l.env.nbLog().since(l.mark)
	if err != nil {
		l.stop()
		return nil, err
	}
	c := countRows(l.d)
	r.metric(p+"rows: address sets", float64(c.AddressSets), "rows")
	r.metric(p+"rows: addresses in them", float64(c.Addresses), "addresses")
	r.metric(p+"rows: router policies", float64(c.Policies), "rows")
	r.metric(p+"rows: NAT", float64(c.NATs), "rows")
	r.seconds(p+"master (fake-fed): fill the fake clientsets", l.fill)
	r.seconds(p+"master (fake-fed): NB connect + monitor", l.st.connected.Sub(l.st.started))
	r.seconds(p+"master (fake-fed): informer list (NB connected → synced)", l.st.synced.Sub(l.st.connected))
	r.seconds(p+"master (fake-fed): informers synced → NB complete", l.nbDone.Sub(l.st.synced))
	r.seconds(p+"master (fake-fed): informers synced → SB complete", l.sbDone.Sub(l.st.synced))
	r.metric(p+"master (fake-fed): NB transactions (controller)", float64(st.Transactions), "transactions")
	r.metric(p+"master (fake-fed): NB operations", float64(st.Operations), "operations")
	r.metric(p+"master (fake-fed): NB transactions (NB log, all writers)", float64(tx.Transactions), "transactions")
	r.Details[p+"master_nb_log"] = tx
	r.Details[p+"rows"] = c
	if l.batch > 0 {
		r.note("%sthe master waits its batch window (%s) before the first NB transaction, as --nat-batch-window does", p, l.batch)
	}
	return l, nil
}

// limitWrite writes the same desired rows with one raw transaction on a
// fresh NB and times it until the SB reflects them.
func (b *bench) limitWrite(ctx context.Context, r *result, l *loaded, p string) (rawWrite, error) {
	b.step("limit: the same rows in one raw transaction on a fresh NB")
	env, err := startOVN(ctx, b.w, true)
	if err != nil {
		return rawWrite{}, err
	}
	defer env.stop()
	ops, err := ourOps(l.d)
	if err != nil {
		return rawWrite{}, err
	}
	lim, err := writeRawWatched(ctx, env, ops, env.nb.complete(l.want), env.sb.complete(l.want))
	if err != nil {
		return lim, wrap("limit", err)
	}
	r.metric(p+"limit: operations in the one raw transaction", float64(lim.ops), "operations")
	r.seconds(p+"limit: raw transaction committed", lim.commit)
	r.seconds(p+"limit: raw transaction → a client monitoring NB has every row", lim.seenNB)
	r.seconds(p+"limit: raw transaction → SB complete", lim.visible)
	r.seconds(p+"limit: northd catch-up after the commit", lim.visible-lim.commit)
	r.Details[p+"limit_rss_mib"] = lim.rss
	return lim, nil
}

// seenNBNote says how the master's converge, timed until a monitoring
// client has every row, compares with the raw transaction timed the same
// way (the check compares it with the raw commit, the strict limit).
func seenNBNote(r *result, name string, took time.Duration, lim rawWrite) {
	if lim.seenNB > 0 {
		r.metric(name+" vs raw, both until a monitor has every row", ratio(took.Seconds(), lim.seenNB.Seconds()), "×")
		r.note("%s: %s against the raw transaction's %s until a client monitoring NB has every row (%s), %s until its reply", name,
			sec(took), sec(lim.seenNB), times(ratio(took.Seconds(), lim.seenNB.Seconds())), sec(lim.commit))
	}
}

// translationCheck: informers synced → NB complete within 3× the raw
// transaction plus the time to list the objects (DESIGN §6).
func translationCheck(r *result, name string, took time.Duration, lim rawWrite, list time.Duration) {
	raw := lim.commit
	budget := 3*raw + list
	r.check(name, took.Seconds(), "s", "<=", budget.Seconds(),
		fmt.Sprintf("%s = %s raw", sec(took), times(ratio(took.Seconds(), raw.Seconds()))),
		fmt.Sprintf("≤ 3× raw (%s) + list (%s) = %s", sec(raw), sec(list), sec(budget)))
	seenNBNote(r, name, took, lim)
}
