package main

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// deadProber answers for every node until it is killed; then, like a
// blackholed host, its probes get no answer until their deadline.
type deadProber struct {
	mu     sync.Mutex
	dead   map[string]bool
	failed map[string]time.Time // first failed probe's return
}

func (p *deadProber) Probe(ctx context.Context, node string, _ []netip.Addr) error {
	p.mu.Lock()
	dead := p.dead[node]
	p.mu.Unlock()
	if !dead {
		return nil
	}
	<-ctx.Done()
	p.mu.Lock()
	if p.failed[node].IsZero() {
		p.failed[node] = time.Now()
	}
	p.mu.Unlock()
	return fmt.Errorf("no answer from %s within the probe timeout", node)
}

func (p *deadProber) kill(node string) {
	p.mu.Lock()
	p.dead[node] = true
	p.mu.Unlock()
}

func (p *deadProber) failedAt(node string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed[node]
}

// runFailover (issue 8 scenario 5).
func (b *bench) runFailover(ctx context.Context, r *result) error {
	return b.failover(ctx, r, translate.BackendHost, "", true)
}

// failover: the master (host selection with default health settings and
// translation, in-process, on the real API server) with N loaded; the host
// of the most services stops answering its probes. Measured: probe
// failure → every status.host rewritten → every row repointed in NB, and
// in SB; NB transactions used.
func (b *bench) failover(ctx context.Context, r *result, backend translate.Backend, p string, checks bool) error {
	ctx, cancel := within(ctx, 20*time.Minute)
	defer cancel()
	a, err := b.apiServer(ctx)
	if err != nil {
		return err
	}
	if err := b.ensureHosts(ctx, a); err != nil {
		return err
	}
	objs, err := a.snapshot(ctx)
	if err != nil {
		return err
	}
	cfg := b.w.config(backend)
	d := desired(cfg, objs)
	want := indexDesired(d)
	sets, err := b.w.hostSets(d, backend)
	if err != nil {
		return err
	}
	perHost := map[string][]*egressv1.EgressService{}
	for _, es := range objs.ess {
		perHost[es.Status.Host] = append(perHost[es.Status.Host], es)
	}
	victim := ""
	for h, ess := range perHost {
		if h != "" && (victim == "" || len(ess) > len(perHost[victim]) || (len(ess) == len(perHost[victim]) && h < victim)) {
			victim = h
		}
	}
	moved := map[string]bool{}
	var ips []string
	in := translate.InputFromObjects(cfg, objs.translateObjects())
	for _, es := range perHost[victim] {
		k := translate.EgressServiceKey(es)
		moved[k] = true
		for _, e := range translate.ServiceEndpoints(in.Services[k], in.EndpointSlices[k], cfg.ClusterSubnets) {
			ips = append(ips, e.IP.String())
		}
	}

	b.step("failover: loading the master (%s backend) on the real API server", backend)
	env, err := startOVN(ctx, b.w, true)
	if err != nil {
		return err
	}
	defer env.stop()
	ccfg := a.clientConfig(b.opts.kubeQPS, nil)
	kube, err := kubernetes.NewForConfig(ccfg)
	if err != nil {
		return wrap("client", err)
	}
	egress, err := egressclient.NewForConfig(ccfg)
	if err != nil {
		return wrap("client", err)
	}
	rec, stopRec, err := apiRecorder(ctx, kube)
	if err != nil {
		return err
	}
	defer stopRec()
	prober := &deadProber{dead: map[string]bool{}, failed: map[string]time.Time{}}
	sc := selection.DefaultConfig()
	sc.Prober = prober
	env.sb.markBase()
	st, err := startStack(ctx, stackOpts{kube: kube, egress: egress, recorder: rec, nbAddr: env.o.NBAddress(),
		cfg: cfg, batch: batchWindow(backend), selection: &sc}, b.log)
	if err != nil {
		return err
	}
	defer func() { _ = st.stop() }()
	nbDone, err := env.nb.wait(ctx, "NB complete", env.nb.complete(want))
	if err == nil {
		_, err = env.sb.wait(ctx, "SB complete", env.sb.complete(want))
	}
	if err != nil {
		return wrap("load", err)
	}
	r.seconds(p+"load (real API server): informers synced → NB complete", nbDone.Sub(st.synced))
	for st.sel.HealthRounds() < 2 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	env.settle()

	seen, err := newMoveWatch(st.egInf.K8s().V1().EgressServices().Informer(), victim, moved)
	if err != nil {
		return err
	}
	mark := env.nbLog().mark()
	before := st.sync.Stats()
	selBefore := st.sel.Stats()
	b.step("failover: %s stops answering (%d services)", victim, len(moved))
	dead := time.Now()
	prober.kill(victim)

	nbCond, sbCond := repointed(env, sets, victim, ips, backend == translate.BackendOVN)
	nbAt, err := env.nb.wait(ctx, "rows repointed in NB", nbCond)
	var sbAt time.Time
	if err == nil {
		sbAt, err = env.sb.wait(ctx, "rows repointed in SB", sbCond)
	}
	if err != nil {
		return wrap("failover", err)
	}
	failed := prober.failedAt(victim)
	lastStatus, n := seen.last()
	after := st.sync.Stats()
	selAfter := st.sel.Stats()
	env.settle()
	tx, err := env.nbLog().since(mark)
	if err != nil {
		return err
	}
	r.metric(p+"services on the failed host", float64(len(moved)), "services")
	r.metric(p+"endpoints rerouted", float64(len(ips)), "endpoints")
	r.seconds(p+"host stops answering → probe fails (interval + timeout)", failed.Sub(dead))
	r.seconds(p+"probe fails → last status.host seen by the master's informer", lastStatus.Sub(failed))
	r.seconds(p+"last status.host seen → rows repointed in NB (NB part)", nbAt.Sub(lastStatus))
	r.seconds(p+"probe fails → rows repointed in NB", nbAt.Sub(failed))
	r.seconds(p+"probe fails → SB reflects it", sbAt.Sub(failed))
	r.seconds(p+"host stops answering → rows repointed in NB", nbAt.Sub(dead))
	r.metric(p+"status.host writes", float64(selAfter.StatusWrites-selBefore.StatusWrites), "writes")
	r.metric(p+"status.host changes seen", float64(n), "services")
	r.metric(p+"NB transactions (controller)", float64(after.Transactions-before.Transactions), "transactions")
	r.metric(p+"NB syncs (controller)", float64(after.Syncs-before.Syncs), "syncs")
	r.metric(p+"NB transactions (NB log, until settled)", float64(tx.Transactions), "transactions")
	r.Details[p+"failover_nb_log"] = tx
	if n < len(moved) {
		r.note("%sonly %d of %d status.host changes were seen by the master's informer before NB was repointed", p, n, len(moved))
	}
	r.note("%sthe prober is the bench's: a dead host's probe gets no answer until its 1 s timeout, probed every 1 s (the defaults); node agents are taken as ready (no readiness handshake delay)", p)
	if checks {
		d1 := nbAt.Sub(failed)
		r.check("failover: probe failure → rows repointed in NB", d1.Seconds(), "s", "<", 3, sec(d1), "< 3 s")
		d2 := nbAt.Sub(lastStatus)
		r.check("failover: NB part (last status.host seen → NB)", d2.Seconds(), "s", "<", 0.1, sec(d2), "< 100 ms")
	}
	return nil
}

// repointed is the condition of a finished failover in NB and in SB: the
// victim's set is empty (or gone) and every moved endpoint is in another
// host's set; on the gateway path its NAT rows are on other hosts too.
func repointed(env *ovnEnv, sets map[string]string, victim string, ips []string, gateway bool) (nb, sb func() bool) {
	var others []string
	for h, s := range sets {
		if h != victim {
			others = append(others, s)
		}
	}
	cond := func(have setIndex, nats map[string]map[string]int) bool {
		if len(have[sets[victim]]) > 0 {
			return false
		}
		for _, ip := range ips {
			found := false
			for _, s := range others {
				if have[s][ip] {
					found = true
					break
				}
			}
			if !found {
				return false
			}
			if nats != nil && (nats[ip][victim] > 0 || len(nats[ip]) == 0) {
				return false
			}
		}
		return true
	}
	var nats map[string]map[string]int
	if gateway {
		nats = env.nb.nats
	}
	return func() bool { return cond(env.nb.sets, nats) }, func() bool { return cond(env.sb.sets, nil) }
}

// moveWatch records when each moved EgressService's status.host left the
// victim, as the master's own informer delivers it (a handler beside the
// translation controller's).
type moveWatch struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newMoveWatch(inf cache.SharedIndexInformer, victim string, moved map[string]bool) (*moveWatch, error) {
	m := &moveWatch{at: map[string]time.Time{}}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, cur any) {
		es, ok := cur.(*egressv1.EgressService)
		k := ""
		if ok {
			k = translate.EgressServiceKey(es)
		}
		if ok && moved[k] && es.Status.Host != victim {
			m.mu.Lock()
			if m.at[k].IsZero() {
				m.at[k] = time.Now()
			}
			m.mu.Unlock()
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("watch status.host: %w", err)
	}
	return m, nil
}

// last is the latest move seen and how many moved.
func (m *moveWatch) last() (time.Time, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var last time.Time
	for _, t := range m.at {
		if t.After(last) {
			last = t
		}
	}
	return last, len(m.at)
}
