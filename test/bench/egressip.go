package main

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"net/netip"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	eipfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// eipSize is the EgressIP scenario's size: pods selected by objects, each
// object with one IP on one egress node (object o on node o mod K).
type eipSize struct {
	Pods    int `json:"selected_pods"`
	Objects int `json:"egressips"`
}

// eipNamespaces spreads the selected pods over this many namespaces.
const eipNamespaces = 10

// eipObject is the object selecting pod i.
func (s eipSize) object(i int) int { return i % s.Objects }

func eipName(o int) string { return fmt.Sprintf("eip-%04d", o) }

// eipIP is object o's egress IP: in the nodes' primary network
// (172.18.0.0/16), past their own addresses (172.18.60.0/22).
func eipIP(o int) netip.Addr { return nth4(netip.MustParsePrefix("172.18.60.0/22"), o+1) }

// eipPod is selected pod i's address and node: the world's endpoint layout
// (pod i/K+3 of node i mod K), which the EgressIP scenario runs without.
func (w *world) eipPod(i int) (netip.Addr, int) {
	n := i % w.size.Nodes
	return w.topo.Nodes[n].PodIP(ipfamily.V4, i/w.size.Nodes+3), n
}

// eipObjects are the EgressIP scenario's cluster: every node egress
// assignable, the namespaces, the selected pods (Running), and the
// EgressIPs with their assignment already in status.items.
type eipObjects struct {
	nodes []*corev1.Node
	nss   []*corev1.Namespace
	pods  []*corev1.Pod
	eips  []*egressipv1.EgressIP
}

func (w *world) eipObjects(s eipSize) eipObjects {
	var o eipObjects
	for _, n := range w.topo.Nodes {
		node := w.topo.NodeObject(n)
		node.Labels[egressip.LabelEgressAssignable] = ""
		o.nodes = append(o.nodes, node)
	}
	for i := 0; i < eipNamespaces; i++ {
		o.nss = append(o.nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: eipNamespace(i), Labels: map[string]string{"bench": "egressip"}}})
	}
	for i := 0; i < s.Pods; i++ {
		ip, n := w.eipPod(i)
		o.pods = append(o.pods, w.eipPodObject(i, s.object(i), ip, n))
	}
	for obj := 0; obj < s.Objects; obj++ {
		node := w.nodeName(obj % w.size.Nodes)
		o.eips = append(o.eips, &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: eipName(obj)},
			Spec: egressipv1.EgressIPSpec{EgressIPs: []string{eipIP(obj).String()},
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"bench": "egressip"}},
				PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"egressip": eipName(obj)}}},
			Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: node, EgressIP: eipIP(obj).String()}}}})
	}
	return o
}

func eipNamespace(i int) string { return fmt.Sprintf("bench-eip-%d", i) }

// eipPodObject is a Running pod of object obj with address ip on node n;
// i names it.
func (w *world) eipPodObject(i, obj int, ip netip.Addr, n int) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: eipNamespace(i % eipNamespaces), Name: fmt.Sprintf("pod-%06d", i),
		Labels: map[string]string{"egressip": eipName(obj)}},
		Spec:   corev1.PodSpec{NodeName: w.nodeName(n)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}}
}

// desired is what the master writes for them: the EgressIPs' rows and the
// cluster-wide rows translation keeps (the node-IPs set the allow policies
// name).
func (o eipObjects) desired(cfg translate.Config) *translate.Desired {
	d := egressservice.Translate(translate.InputFromObjects(cfg, translate.Objects{Nodes: o.nodes}))
	in, _ := egressip.EgressIPRowsFrom(cfg, o.eips, o.nss, o.pods, o.nodes)
	d.Merge(egressip.TranslateEgressIPs(in))
	return d
}

// runEgressIP (issue 19 item 6): EgressIP rows shaped for scale — per
// object one address set of its pods, one reroute to its egress nodes, and
// on each egress node's GR one SNAT matching the set (NAT.match; one per pod
// without it) — against ovn-kubernetes' shape, one reroute policy and one
// SNAT row per pod, on the same OVN in the same run: rows, northd's
// convergence (one raw transaction each → SB complete) and one pod's change
// (one raw transaction each → SB, northd recomputes). Ours also through the
// master's EgressIP rows controller (informers fed directly): converge
// against its raw transaction, and pods created and deleted one at a time.
func (b *bench) runEgressIP(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 40*time.Minute)
	defer cancel()
	w, s := b.w, b.opts.eip
	if s.Pods < 3 || s.Objects < 1 || s.Objects > 1000 {
		return fmt.Errorf("-eip-pods must be at least 3 and -eips between 1 and 1000")
	}
	r.Details["egressip_size"] = s
	objs := w.eipObjects(s)
	cfg := w.config(translate.BackendHost)
	d := objs.desired(cfg)
	want := indexDesired(d)
	eipRows := countRows(egressip.TranslateEgressIPs(must(egressip.EgressIPRowsFrom(cfg, objs.eips, objs.nss, objs.pods, objs.nodes))))
	r.metric("selected pods", float64(s.Pods), "pods")
	r.metric("EgressIPs (one IP on one egress node each)", float64(s.Objects), "objects")
	r.metric("ours: address sets", float64(eipRows.AddressSets), "rows")
	r.metric("ours: router policies", float64(eipRows.Policies), "rows")
	r.metric("ours: NAT rows", float64(eipRows.NATs), "rows")
	r.metric("peer: router policies (one per pod)", float64(s.Pods), "rows")
	r.metric("peer: NAT rows (one per pod)", float64(s.Pods), "rows")
	r.check("EgressIP router policies ∝ objects, not pods", float64(eipRows.Policies), "rows", "==", float64(3*s.Objects),
		fmt.Sprintf("%d for %d pods", eipRows.Policies, s.Pods), fmt.Sprintf("3 per object = %d", 3*s.Objects))
	if w.natMatch {
		r.check("EgressIP NAT rows ∝ egress nodes, not pods (NAT.match)", float64(eipRows.NATs), "rows", "==", float64(s.Objects),
			fmt.Sprintf("%d for %d pods", eipRows.NATs, s.Pods), fmt.Sprintf("1 per (object, egress node) = %d", s.Objects))
	} else {
		r.note("this NB has no NAT.match (OVN < 24.09): the EgressIP SNAT is one row per pod, as ovn-kubernetes writes it")
	}

	l, err := b.eipLoad(ctx, r, objs, cfg, d, want)
	if err != nil {
		return err
	}
	chs := w.eipChanges(s, b.opts.churn)
	ours, err := b.eipChurnMaster(ctx, l, d, chs)
	l.stop()
	if err != nil {
		return wrap("churn through the master", err)
	}
	ours.report(r, "ours (master): ", len(chs))
	r.check("one selected pod created or deleted → NB through the master, p99", ours.nb.pct(0.99).Seconds(), "s", "<", 0.05,
		ms(ours.nb.pct(0.99)), "< 50 ms")
	r.check("router policy writes when selected pods change", float64(ours.policyWrites), "transactions", "==", 0,
		fmt.Sprint(ours.policyWrites), "0")
	if w.natMatch {
		r.check("northd recomputes when selected pods change", float64(ours.northd+ours.lflow), "recomputes", "==", 0,
			fmt.Sprintf("northd %d, lflow %d", ours.northd, ours.lflow), "0 (incremental)")
	}

	lim, err := b.limitWrite(ctx, r, l, "ours ")
	if err != nil {
		return err
	}
	translationCheck(r, "EgressIP rows: synced → NB complete (informers fed directly)", l.nbDone.Sub(l.st.synced), lim,
		l.st.synced.Sub(l.st.connected))

	peerChs := w.eipChanges(s, b.opts.peerChurn)
	raw, err := b.rawChurnOf(ctx, r, "ours (raw): ", func(env *ovnEnv) error {
		ops, err := ourOps(d)
		if err == nil {
			_, err = writeRaw(ctx, env, ops, env.sb.complete(want))
		}
		return err
	}, func(env *ovnEnv) rawChange { return b.eipOurChange(env, d) }, peerChs)
	if err != nil {
		return wrap("raw churn", err)
	}
	var peerLoad rawWrite
	peer, err := b.rawChurnOf(ctx, r, "peer (raw): ", func(env *ovnEnv) error {
		var err error
		peerLoad, err = b.eipLoadPeer(ctx, r, env, objs)
		return err
	}, b.eipPeerChange, peerChs)
	if err != nil {
		return wrap("peer churn", err)
	}
	cr := ratio(peerLoad.visible.Seconds(), lim.visible.Seconds())
	r.metric("converge in northd, peer / ours (raw write → SB complete)", cr, "×")
	r.note("converge in northd: peer %s vs ours %s = %s", sec(peerLoad.visible), sec(lim.visible), times(cr))
	pr := ratio(peer.sb.pct(0.5).Seconds(), raw.sb.pct(0.5).Seconds())
	r.metric("one pod's change, peer / ours (raw change → SB, p50)", pr, "×")
	r.note("one pod's change: peer %s vs ours %s = %s (p50, raw change → SB)", sec(peer.sb.pct(0.5)), sec(raw.sb.pct(0.5)), times(pr))
	r.metric("peer (raw) / ours through the master, change → SB p50", ratio(peer.sb.pct(0.5).Seconds(), ours.sb.pct(0.5).Seconds()), "×")
	return nil
}

// must drops the problems of a rows input the bench built itself.
func must(in egressip.EgressIPRowsInput, _ translate.Problems) egressip.EgressIPRowsInput {
	return in
}

// eipLoad starts the master (translation and EgressIP) on fake clientsets
// holding objs and waits until NB and SB hold want (d's rows).
func (b *bench) eipLoad(ctx context.Context, r *result, objs eipObjects, cfg translate.Config, d *translate.Desired, want wantIndex) (*loaded, error) {
	b.step("loading the in-process master (translation, egressip), informers fed directly")
	env, err := startOVN(ctx, b.w, true)
	if err != nil {
		return nil, err
	}
	l := &loaded{env: env, cfg: cfg, d: d, want: want}
	start := time.Now()
	var kobjs []runtime.Object
	for _, n := range objs.nodes {
		kobjs = append(kobjs, n)
	}
	for _, ns := range objs.nss {
		kobjs = append(kobjs, ns)
	}
	for _, p := range objs.pods {
		kobjs = append(kobjs, p)
	}
	var eobjs []runtime.Object
	for _, e := range objs.eips {
		eobjs = append(eobjs, e)
	}
	l.kube = kubefake.NewSimpleClientset(kobjs...)
	l.egress = egressfake.NewSimpleClientset()
	eip := eipfake.NewSimpleClientset(eobjs...)
	l.fill = time.Since(start)
	l.mark = env.nbLog().mark()
	env.sb.markBase()
	l.st, err = startStack(ctx, stackOpts{kube: l.kube, egress: l.egress, eip: eip, recorder: &record.FakeRecorder{},
		nbAddr: env.o.NBAddress(), cfg: cfg, controllers: []string{master.ControllerTranslation, master.ControllerEgressIP}}, b.log)
	if err != nil {
		env.stop()
		return nil, err
	}
	lctx, cancel := within(ctx, 10*time.Minute)
	defer cancel()
	if l.nbDone, err = env.nb.wait(lctx, "NB to hold every EgressIP row", env.nb.complete(want)); err == nil {
		l.sbDone, err = env.sb.wait(lctx, "SB to reflect every EgressIP row", env.sb.complete(want))
	}
	if err != nil {
		l.stop()
		return nil, err
	}
	rows, all := l.st.m.Translation().EgressIPStats(), l.st.m.Translation().Stats()
	r.seconds("ours (master): fill the fake clientsets", l.fill)
	r.seconds("ours (master): informer list (NB connected → synced)", l.st.synced.Sub(l.st.connected))
	r.seconds("ours (master): informers synced → NB complete", l.nbDone.Sub(l.st.synced))
	r.seconds("ours (master): informers synced → SB complete", l.sbDone.Sub(l.st.synced))
	r.metric("ours (master): EgressIP rows syncs to converge", float64(rows.Syncs), "syncs")
	r.metric("ours (master): NB transactions to converge (EgressIP and EgressService rows: one controller)", float64(all.Transactions), "transactions")
	return l, nil
}

// eipChanges plans n changes of selected pods (changesOver; svc is the
// EgressIP object).
func (w *world) eipChanges(s eipSize, n int) []change {
	return w.changesOver(n, s.Objects, 37, 1)
}

// eipSets are the address set of each object (by object name).
func eipSets(d *translate.Desired) map[string]string {
	out := map[string]string{}
	for k, rows := range d.Rows {
		if name, ok := k.EgressIP(); ok {
			for _, as := range rows.AddressSets {
				out[name] = as.Name
			}
		}
	}
	return out
}

// eipChurnMaster creates and deletes selected pods in the fake clientset one
// change at a time and times each until NB, then SB, show it (the pod in
// its object's set; without NAT.match also its SNAT row and flow).
func (b *bench) eipChurnMaster(ctx context.Context, l *loaded, d *translate.Desired, chs []change) (churnResult, error) {
	var res churnResult
	env, sets := l.env, eipSets(d)
	env.settle()
	if err := env.clearEngine(); err != nil {
		return res, err
	}
	b.step("%d selected pods created or deleted, one at a time, through the master", len(chs))
	mark := env.nbLog().mark()
	pods := map[netip.Addr]*corev1.Pod{}
	for i, c := range chs {
		name := eipName(c.svc)
		nbConds, sbConds := b.eipConds(env, sets[name], name, c)
		apply := func(ctx context.Context) error { return l.eipApply(ctx, b.w, pods, b.opts.eip.Pods+i, c) }
		if err := res.time(ctx, env, c.kind, apply, nbConds, sbConds); err != nil {
			return res, err
		}
	}
	return res, b.churnCounters(env, mark, &res)
}

// eipApply deletes the pod of c.del and creates one of c.add (named after
// index i) in the fake clientset.
func (l *loaded) eipApply(ctx context.Context, w *world, pods map[netip.Addr]*corev1.Pod, i int, c change) error {
	if c.del.IsValid() {
		p := pods[c.del]
		if err := l.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete pod %s: %w", p.Name, err)
		}
		delete(pods, c.del)
	}
	if c.add.IsValid() {
		p := w.eipPodObject(i, c.svc, c.add, c.node)
		if _, err := l.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		pods[c.add] = p
	}
	return nil
}

// eipConds are the conditions under which NB (resp. SB) shows a change of
// ours: the object's set holds the added pod and lacks the removed one;
// without NAT.match, its per-pod SNAT row (named after the object; resp.
// flow) follows.
func (b *bench) eipConds(env *ovnEnv, set, name string, c change) (nb, sb func() bool) {
	return changeConds(env, map[string]string{name: set}, name, c, !b.w.natMatch, "")
}

// eipOurChange is a pod's change in ours, written raw: a mutation of its
// object's set and, without NAT.match, its SNAT row on the egress GR.
func (b *bench) eipOurChange(env *ovnEnv, d *translate.Desired) rawChange {
	sets := eipSets(d)
	nats := map[netip.Addr]string{}
	return func(ch change) ([]any, func() bool, func([]ovsdb.OperationResult)) {
		name := eipName(ch.svc)
		set := sets[name]
		gr := translate.GatewayRouter(b.w.nodeName(ch.svc % b.w.size.Nodes))
		var muts, params []any
		var conds []func() bool
		var done func([]ovsdb.OperationResult)
		if ch.del.IsValid() {
			muts = append(muts, []any{"addresses", "delete", []any{"set", []any{ch.del.String()}}})
			conds = append(conds, inSet(env.sb.sets, set, ch.del.String(), false))
			if !b.w.natMatch {
				params = append(params, deleteNAT(gr, nats[ch.del]))
				conds = append(conds, env.sb.hasFlow(stageSNAT, ch.del.String(), false))
			}
		}
		if ch.add.IsValid() {
			muts = append(muts, []any{"addresses", "insert", []any{"set", []any{ch.add.String()}}})
			conds = append(conds, inSet(env.sb.sets, set, ch.add.String(), true))
			if !b.w.natMatch {
				at := len(params)
				params = append(params, snatRow("nn", ch.add.String(), eipIP(ch.svc).String(), nil),
					attachNATs(gr, "insert", []any{[]any{"named-uuid", "nn"}}))
				conds = append(conds, env.sb.hasFlow(stageSNAT, ch.add.String(), true))
				done = func(reply []ovsdb.OperationResult) { nats[ch.add] = reply[at+1].UUID.GoUUID }
			}
		}
		params = append([]any{map[string]any{"op": "mutate", "table": "Address_Set", "where": []any{[]any{"name", "==", set}}, "mutations": muts}}, params...)
		return params, all(conds), done
	}
}

// deleteNAT detaches one NAT row from a GR (unreferenced, the row is gone).
func deleteNAT(gr, uuid string) map[string]any {
	return attachNATs(gr, "delete", []any{[]any{"uuid", uuid}})
}

// eipLoadPeer writes ovn-kubernetes' shape of the same EgressIPs in one raw
// transaction: per selected pod a priority-100 reroute to its object's
// egress node's GR join address and a SNAT row on that GR.
func (b *bench) eipLoadPeer(ctx context.Context, r *result, env *ovnEnv, objs eipObjects) (rawWrite, error) {
	b.step("peer shape: one policy and one SNAT per selected pod, one raw transaction on a fresh NB")
	params := []any{"OVN_Northbound"}
	var refs []any
	nats := map[string][]any{}
	for i := range objs.pods {
		ip, _ := b.w.eipPod(i)
		obj := b.opts.eip.object(i)
		pname, nname := fmt.Sprintf("p%d", i), fmt.Sprintf("n%d", i)
		params = append(params, b.eipPeerPolicy(pname, ip, obj), snatRow(nname, ip.String(), eipIP(obj).String(), nil))
		refs = append(refs, []any{"named-uuid", pname})
		gr := translate.GatewayRouter(b.w.nodeName(obj % b.w.size.Nodes))
		nats[gr] = append(nats[gr], []any{"named-uuid", nname})
	}
	params = append(params, attachPolicies("insert", refs))
	for gr, rs := range nats {
		params = append(params, attachNATs(gr, "insert", rs))
	}
	ops, err := encodeOps(params)
	if err != nil {
		return rawWrite{}, err
	}
	n := len(objs.pods)
	peer, err := writeRaw(ctx, env, ops, all([]func() bool{env.sb.flowsAtLeast(stagePolicy, n), env.sb.flowsAtLeast(stageSNAT, n)}))
	if err != nil {
		return peer, wrap("peer shape", err)
	}
	r.seconds("peer: raw transaction committed", peer.commit)
	r.seconds("peer: raw transaction → SB complete", peer.visible)
	r.Details["peer_rss_mib"] = peer.rss
	return peer, nil
}

// eipPeerPolicy is ovn-kubernetes' EgressIP reroute of one pod.
func (b *bench) eipPeerPolicy(uuidName string, ip netip.Addr, obj int) map[string]any {
	join := b.w.topo.Nodes[obj%b.w.size.Nodes].JoinIPs[0].Addr().String()
	return map[string]any{"op": "insert", "table": "Logical_Router_Policy", "uuid-name": uuidName,
		"row": map[string]any{"priority": egressip.EgressIPReroutePriority, "match": "ip4.src == " + ip.String(), "action": "reroute",
			"nexthops":     []any{"set", []any{join}},
			"external_ids": []any{"map", []any{[]any{"k8s.ovn.org/owner", eipName(obj)}}}}}
}

// eipPeerChange is a pod's change in ovn-kubernetes' shape: its policy and
// its SNAT row inserted or deleted.
func (b *bench) eipPeerChange(env *ovnEnv) rawChange {
	type rows struct{ policy, nat string }
	have := map[netip.Addr]rows{}
	return func(ch change) ([]any, func() bool, func([]ovsdb.OperationResult)) {
		gr := translate.GatewayRouter(b.w.nodeName(ch.svc % b.w.size.Nodes))
		var params []any
		var conds []func() bool
		var done func([]ovsdb.OperationResult)
		if ch.del.IsValid() {
			h := have[ch.del]
			params = append(params, attachPolicies("delete", []any{[]any{"uuid", h.policy}}),
				map[string]any{"op": "delete", "table": "Logical_Router_Policy", "where": []any{[]any{"_uuid", "==", []any{"uuid", h.policy}}}},
				deleteNAT(gr, h.nat))
			conds = append(conds, env.sb.hasFlow(stagePolicy, ch.del.String(), false), env.sb.hasFlow(stageSNAT, ch.del.String(), false))
		}
		if ch.add.IsValid() {
			at := len(params)
			params = append(params, b.eipPeerPolicy("np", ch.add, ch.svc), attachPolicies("insert", []any{[]any{"named-uuid", "np"}}),
				snatRow("nn", ch.add.String(), eipIP(ch.svc).String(), nil), attachNATs(gr, "insert", []any{[]any{"named-uuid", "nn"}}))
			conds = append(conds, env.sb.hasFlow(stagePolicy, ch.add.String(), true), env.sb.hasFlow(stageSNAT, ch.add.String(), true))
			done = func(reply []ovsdb.OperationResult) {
				have[ch.add] = rows{policy: reply[at].UUID.GoUUID, nat: reply[at+2].UUID.GoUUID}
			}
		}
		return params, all(conds), done
	}
}
