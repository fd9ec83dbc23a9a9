package main

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"net/netip"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// change is one endpoint change: add (a new pod), move (the pod replaced by
// one with a new address, as a rollout does) or remove; every third change
// starts on a new service.
type change struct {
	kind     string
	svc      int
	node     int // the node of the added pod
	add, del netip.Addr
}

// changes plans n changes: add, move, remove on one service, then the next
// service (spread over hosts and nodes).
func (w *world) changes(n int) []change {
	return w.changesOver(n, w.size.Services, 7919, 13)
}

// changesOver plans n changes over groups (services, or EgressIPs: svc is
// the group): a pod added, moved to a new address on the next node (as a
// rollout does), removed; every third change starts on the group
// (i/3*stride + offset) mod groups.
func (w *world) changesOver(n, groups, stride, offset int) []change {
	var out []change
	var cur netip.Addr
	for i := 0; i < n; i++ {
		s := (i/3*stride + offset) % groups
		node := (i/3*31 + 5) % w.size.Nodes
		switch i % 3 {
		case 0:
			cur = w.newPod(node)
			out = append(out, change{kind: "add", svc: s, node: node, add: cur})
		case 1:
			node = (node + 1) % w.size.Nodes
			next := w.newPod(node)
			out = append(out, change{kind: "move", svc: s, node: node, add: next, del: cur})
			cur = next
		default:
			out = append(out, change{kind: "remove", svc: s, del: cur})
		}
	}
	return out
}

// latencies collects per-change latencies.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// applySlice changes service s's EndpointSlice in the fake clientset.
func (l *loaded) applySlice(ctx context.Context, w *world, c change) error {
	api := l.kube.DiscoveryV1().EndpointSlices(w.namespace(c.svc))
	name := w.serviceName(c.svc) + "-ipv4"
	s, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get endpointslice %s: %w", name, err)
	}
	s = s.DeepCopy()
	if c.del.IsValid() {
		s.Endpoints = slices.DeleteFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool {
			return slices.Contains(e.Addresses, c.del.String())
		})
	}
	if c.add.IsValid() {
		ready := true
		node := w.nodeName(c.node)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{c.add.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node})
	}
	// The fake clientset keeps resourceVersions as given; a real API server
	// bumps them on every write, and the master caches parsed objects by them.
	l.rv++
	s.ResourceVersion = fmt.Sprintf("bench-%d", l.rv)
	if _, err := api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update endpointslice %s: %w", name, err)
	}
	return nil
}

// churnResult is what a churn run measured.
type churnResult struct {
	nb, sb             latencies
	policyWrites, txns int
	northd, lflow      int
	byTable            map[string]int
}

// churnOurs applies changes one at a time to the loaded master and times
// each until NB committed it and until the SB reflects it; OVN settles
// between changes.
func (b *bench) churnOurs(ctx context.Context, l *loaded, chs []change) (churnResult, error) {
	var res churnResult
	sets, err := b.w.hostSets(l.d, l.cfg.Backend)
	if err != nil {
		return res, err
	}
	gateway := l.cfg.Backend == translate.BackendOVN
	env := l.env
	env.settle()
	if err := env.clearEngine(); err != nil {
		return res, err
	}
	b.step("%d endpoint changes, one at a time", len(chs))
	mark := env.nbLog().mark()
	for _, c := range chs {
		nbConds, sbConds := changeConds(env, sets, b.w.nodeName(b.w.host(c.svc)), c, gateway, b.w.natSet(c))
		if err := res.time(ctx, env, c.kind, func(ctx context.Context) error { return l.applySlice(ctx, b.w, c) }, nbConds, sbConds); err != nil {
			return res, err
		}
	}
	return res, b.churnCounters(env, mark, &res)
}

// time applies one change and records how long NB, then SB, took to meet
// their conditions; then lets OVN settle. The bound is a hang guard, not a
// target: a peer-shape change costs northd a full recompute of its 40,000
// policies, 57 s on 25.03 on this machine on a busy day (60 s was too short).
func (res *churnResult) time(ctx context.Context, env *ovnEnv, what string, apply func(context.Context) error, nbConds, sbConds func() bool) error {
	ctx, cancel := within(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := apply(ctx); err != nil {
		return err
	}
	nbAt, err := env.nb.wait(ctx, what+" in NB", nbConds)
	if err != nil {
		return err
	}
	sbAt, err := env.sb.wait(ctx, what+" in SB", sbConds)
	if err != nil {
		return err
	}
	res.nb = append(res.nb, nbAt.Sub(start))
	res.sb = append(res.sb, sbAt.Sub(start))
	env.settle()
	return nil
}

// natSet is the name of the per-service NAT address set a change touches
// on the gateway path with NAT.match ("" without NAT.match).
func (w *world) natSet(c change) string {
	if !w.natMatch {
		return ""
	}
	return egressservice.NATSetName(w.nodeName(w.host(c.svc)), ipfamily.V4, w.key(c.svc))
}

// changeConds are the conditions under which NB (resp. SB) reflects a
// change: the host's set holds the added address and lacks the removed
// one; on the gateway path the NAT rows (resp. SNAT flows) follow — or,
// with NAT.match, the service's NAT address set (natSet).
func changeConds(env *ovnEnv, sets map[string]string, host string, c change, gateway bool, natSet string) (nb, sb func() bool) {
	set := sets[host]
	var nbConds, sbConds []func() bool
	for _, x := range []struct {
		ip   netip.Addr
		want bool
	}{{c.add, true}, {c.del, false}} {
		if !x.ip.IsValid() {
			continue
		}
		ip := x.ip.String()
		nbConds = append(nbConds, inSet(env.nb.sets, set, ip, x.want))
		sbConds = append(sbConds, inSet(env.sb.sets, set, ip, x.want))
		switch {
		case gateway && natSet != "":
			nbConds = append(nbConds, inSet(env.nb.sets, natSet, ip, x.want))
			sbConds = append(sbConds, inSet(env.sb.sets, natSet, ip, x.want))
		case gateway:
			nbConds = append(nbConds, env.nb.natOn(ip, host, x.want))
			sbConds = append(sbConds, env.sb.hasFlow(stageSNAT, ip, x.want))
		}
	}
	return all(nbConds), all(sbConds)
}

// churnCounters reads the NB log and northd's engine counters since the
// churn started.
func (b *bench) churnCounters(env *ovnEnv, mark int64, res *churnResult) error {
	tx, err := env.nbLog().since(mark)
	if err != nil {
		return err
	}
	res.txns, res.policyWrites, res.byTable = tx.Transactions, tx.ByTable["Logical_Router_Policy"], tx.ByTable
	eng, err := env.engine()
	if err != nil {
		return err
	}
	res.northd, res.lflow = eng["northd"].recompute, eng["lflow"].recompute
	return nil
}

func all(conds []func() bool) func() bool {
	return func() bool {
		for _, c := range conds {
			if !c() {
				return false
			}
		}
		return true
	}
}

// report records a churn run's numbers under prefix p.
func (c churnResult) report(r *result, p string, n int) {
	r.metric(p+"changes", float64(n), "changes")
	r.seconds(p+"change → NB committed, p50", c.nb.pct(0.5))
	r.seconds(p+"change → NB committed, p99", c.nb.pct(0.99))
	r.seconds(p+"change → SB reflects it, p50", c.sb.pct(0.5))
	r.seconds(p+"change → SB reflects it, p99", c.sb.pct(0.99))
	r.metric(p+"NB transactions", float64(c.txns), "transactions")
	r.metric(p+"NB transactions writing Logical_Router_Policy", float64(c.policyWrites), "transactions")
	r.metric(p+"northd recomputes (inc-engine node northd)", float64(c.northd), "recomputes")
	r.metric(p+"lflow recomputes (inc-engine node lflow)", float64(c.lflow), "recomputes")
	r.Details[p+"nb_log_by_table"] = c.byTable
}

// runChurn (issue 8 scenario 4): one endpoint change at a time with N
// loaded: ours through the master; then, by the same method for both row
// shapes (one raw transaction per change, no controller), ours against the
// peer shape.
func (b *bench) runChurn(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 30*time.Minute)
	defer cancel()
	l, err := b.loadFake(ctx, translate.BackendHost, 0)
	if err != nil {
		return err
	}
	chs := b.w.changes(b.opts.churn)
	ours, err := b.churnOurs(ctx, l, chs)
	l.stop()
	if err != nil {
		return wrap("churn", err)
	}
	ours.report(r, "ours (master): ", len(chs))
	r.note("ours (master): the change is an EndpointSlice update through client-go's fake clientset; latency runs from the update call to the notification of a client monitoring NB (resp. SB)")

	sets, err := b.w.hostSets(l.d, translate.BackendHost)
	if err != nil {
		return err
	}
	raw, err := b.rawChurn(ctx, r, "ours (raw): ", func(env *ovnEnv) error {
		ops, err := ourOps(l.d)
		if err == nil {
			_, err = writeRaw(ctx, env, ops, env.sb.complete(l.want))
		}
		return err
	}, func(env *ovnEnv) rawChange { return b.ourChange(env, sets) })
	if err != nil {
		return wrap("raw churn", err)
	}
	peer, err := b.rawChurn(ctx, r, "peer (raw): ", func(env *ovnEnv) error {
		_, err := b.loadPeer(ctx, r, env)
		return err
	}, b.peerChange)
	if err != nil {
		return wrap("peer churn", err)
	}

	p99 := ours.nb.pct(0.99)
	r.check("one endpoint change → NB through the master, p99", p99.Seconds(), "s", "<", 0.05, ms(p99), "< 50 ms")
	r.check("Logical_Router_Policy writes during churn", float64(ours.policyWrites), "transactions", "==", 0,
		fmt.Sprintf("%d", ours.policyWrites), "0")
	r.check("northd recomputes during churn", float64(ours.northd+ours.lflow), "recomputes", "==", 0,
		fmt.Sprintf("northd %d, lflow %d", ours.northd, ours.lflow), "0 (incremental)")
	rt := ratio(peer.sb.pct(0.5).Seconds(), raw.sb.pct(0.5).Seconds())
	r.check("per endpoint change vs the peer shape (raw change → SB, p50)", rt, "×", ">=", 100,
		fmt.Sprintf("%s vs %s = %s", sec(peer.sb.pct(0.5)), sec(raw.sb.pct(0.5)), times(rt)), "≥ 100× faster")
	mr := ratio(peer.sb.pct(0.5).Seconds(), ours.sb.pct(0.5).Seconds())
	r.metric("peer (raw) / ours through the master, change → SB p50", mr, "×")
	return nil
}

// rawChurn loads a row shape on a fresh NB and applies -peer-churn endpoint
// changes to it, one raw transaction each.
func (b *bench) rawChurn(ctx context.Context, r *result, p string, load func(*ovnEnv) error, render func(*ovnEnv) rawChange) (churnResult, error) {
	return b.rawChurnOf(ctx, r, p, load, render, b.w.changes(b.opts.peerChurn))
}

// rawChurnOf loads a row shape on a fresh NB and applies chs to it, one raw
// transaction each.
func (b *bench) rawChurnOf(ctx context.Context, r *result, p string, load func(*ovnEnv) error, render func(*ovnEnv) rawChange, chs []change) (churnResult, error) {
	env, err := startOVN(ctx, b.w, false)
	if err != nil {
		return churnResult{}, err
	}
	defer env.stop()
	if err := load(env); err != nil {
		return churnResult{}, err
	}
	b.step("%s%d changes, one raw transaction each", p, len(chs))
	res, err := b.churnRaw(ctx, env, chs, render(env))
	if err == nil {
		res.report(r, p, len(chs))
	}
	return res, err
}
