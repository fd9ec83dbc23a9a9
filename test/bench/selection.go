package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// selectionRounds alternate the master and the bare client, so that noise
// from other work on the machine hits both; the best round of each counts.
const selectionRounds = 2

// masterRound is one run of the master's host selection from no hosts.
type masterRound struct {
	took, written, list time.Duration
	stats               selection.Stats
	requests            map[string]int
}

// runSelection: N status.host writes by the master's host selection
// (pkg/k8s/selection as the master wires it, Events to the API server)
// against a bare client doing the same writes with the same parallelism
// and client settings, on the same real API server (DESIGN §6: ≤ 1.5×).
// It leaves every EgressService with the host the master chose.
func (b *bench) runSelection(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 30*time.Minute)
	defer cancel()
	a, err := b.apiServer(ctx)
	if err != nil {
		return err
	}
	r.seconds("setup: objects created in the API server", a.populate)
	r.metric("setup: API writes", float64(a.writes), "writes")
	none := map[string]string{}
	var best masterRound
	var bestBare time.Duration
	var bareWrites int
	for round := 1; round <= selectionRounds; round++ {
		if _, _, err := a.writeHosts(ctx, a.egress, none); err != nil {
			return wrap("clear status.host", err)
		}
		b.step("host selection by the master (round %d)", round)
		m, err := b.selectionMaster(ctx, a)
		if err != nil {
			return err
		}
		hosts, err := a.hosts(ctx)
		if err != nil {
			return err
		}
		if _, _, err := a.writeHosts(ctx, a.egress, none); err != nil {
			return wrap("clear status.host", err)
		}
		b.step("the same writes by a bare client (round %d)", round)
		bare, err := egressclient.NewForConfig(a.clientConfig(b.opts.kubeQPS, nil))
		if err != nil {
			return wrap("client", err)
		}
		n, took, err := a.writeHosts(ctx, bare, hosts)
		if err != nil {
			return wrap("bare client", err)
		}
		r.seconds(fmt.Sprintf("round %d: master, informers synced → every status.host written and idle", round), m.took)
		r.seconds(fmt.Sprintf("round %d: bare client, same writes", round), took)
		if round == 1 || m.took < best.took {
			best = m
		}
		if round == 1 || took < bestBare {
			bestBare, bareWrites = took, n
		}
	}
	r.seconds("master: best round", best.took)
	r.seconds("master: informers synced → last status write counted (polled every 2 ms)", best.written)
	r.seconds("master: informer list (start → synced)", best.list)
	r.metric("master: status writes", float64(best.stats.StatusWrites), "writes")
	r.metric("master: status conflicts", float64(best.stats.Conflicts), "conflicts")
	r.metric("master: node label patches", float64(best.stats.LabelPatches), "patches")
	r.metric("master: API requests, status updates", float64(best.requests["PUT egressservices/status"]), "requests")
	r.metric("master: API requests, Events", float64(best.requests["POST events"]+best.requests["PATCH events"]), "requests")
	r.metric("master: API requests, node patches", float64(best.requests["PATCH nodes"]), "requests")
	r.seconds("bare client: best round", bestBare)
	r.metric("bare client: status writes", float64(bareWrites), "writes")
	r.Details["master_requests"] = best.requests
	qps := "unlimited"
	if b.opts.kubeQPS > 0 {
		qps = fmt.Sprintf("%.0f", b.opts.kubeQPS)
	}
	r.note("both clients: client-side QPS %s, %d parallel writers; the master also posts Events (aggregated by client-go) and node label patches through the same client; %d alternating rounds, best of each", qps, writers, selectionRounds)
	rt := ratio(best.took.Seconds(), bestBare.Seconds())
	r.check("host selection: master vs bare client, same writes", rt, "×", "<=", 1.5,
		fmt.Sprintf("%s vs %s = %s", sec(best.took), sec(bestBare), times(rt)), "≤ 1.5×")
	return nil
}

// selectionMaster runs host selection (health checks off: nothing to
// probe here; failover measures them) until every EgressService has a
// host and the controller is idle.
func (b *bench) selectionMaster(ctx context.Context, a *apiEnv) (masterRound, error) {
	var m masterRound
	n := b.w.size.Services
	count := newRequestCounter()
	cfg := a.clientConfig(b.opts.kubeQPS, count)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return m, wrap("client", err)
	}
	egress, err := egressclient.NewForConfig(cfg)
	if err != nil {
		return m, wrap("client", err)
	}
	rec, stopRec, err := apiRecorder(ctx, kube)
	if err != nil {
		return m, err
	}
	defer stopRec()
	sc := selection.DefaultConfig()
	sc.HealthInterval = 0
	sc.Writers = writers
	st, err := startStack(ctx, stackOpts{kube: kube, egress: egress, recorder: rec, cfg: b.w.config(translate.BackendHost), selection: &sc}, b.log)
	if err != nil {
		return m, err
	}
	var written time.Time
	for {
		s := st.sel.Stats()
		if s.StatusWrites >= n && written.IsZero() {
			written = time.Now()
		}
		if s.StatusWrites >= n && st.idle() {
			break
		}
		if ctx.Err() != nil {
			_ = st.stop()
			return m, wrap("master host selection", ctx.Err())
		}
		time.Sleep(2 * time.Millisecond)
	}
	m.took = time.Since(st.synced)
	m.written = written.Sub(st.synced)
	m.list = st.synced.Sub(st.started)
	m.stats = st.sel.Stats()
	m.requests = count.snapshot()
	return m, st.stop()
}
