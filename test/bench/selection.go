package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
)

// runSelection: N status.host writes by the master's host selection
// (pkg/k8s/selection as the master wires it, Events to the API server)
// against a bare client doing the same writes with the same parallelism
// and client settings, on the same real API server (DESIGN §6: ≤ 1.5×).
// It leaves every EgressService with the host the master chose.
func (b *bench) runSelection(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 20*time.Minute)
	defer cancel()
	a, err := b.apiServer(ctx)
	if err != nil {
		return err
	}
	n := b.w.size.Services
	r.seconds("setup: objects created in the API server", a.populate)
	r.metric("setup: API writes", float64(a.writes), "writes")
	none := map[string]string{}
	if _, _, err := a.writeHosts(ctx, a.egress, none); err != nil {
		return wrap("clear status.host", err)
	}

	// The master: from informers synced to every host written.
	count := newRequestCounter()
	cfg := a.clientConfig(b.opts.kubeQPS, count)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return wrap("client", err)
	}
	egress, err := egressclient.NewForConfig(cfg)
	if err != nil {
		return wrap("client", err)
	}
	rec, stopRec, err := apiRecorder(ctx, kube)
	if err != nil {
		return err
	}
	sc := selection.DefaultConfig()
	sc.HealthInterval = 0 // nothing to probe here; failover measures health checks
	sc.Writers = writers
	st, err := startStack(ctx, stackOpts{kube: kube, egress: egress, recorder: rec, cfg: b.w.config("host"), selection: &sc}, b.log)
	if err != nil {
		stopRec()
		return err
	}
	var done time.Time
	for {
		if s := st.sel.Stats(); s.StatusWrites >= n && st.idle() {
			done = time.Now()
			break
		}
		if ctx.Err() != nil {
			_ = st.stop()
			stopRec()
			return wrap("master host selection", ctx.Err())
		}
		time.Sleep(2 * time.Millisecond)
	}
	masterTime := done.Sub(st.synced)
	stats := st.sel.Stats()
	if err := st.stop(); err != nil {
		stopRec()
		return err
	}
	stopRec()
	reqs := count.snapshot()
	hosts, err := a.hosts(ctx)
	if err != nil {
		return err
	}
	perHost := map[string]int{}
	for _, h := range hosts {
		perHost[h]++
	}

	// The bare client: the same writes, same parallelism and settings.
	if _, _, err := a.writeHosts(ctx, a.egress, none); err != nil {
		return wrap("clear status.host", err)
	}
	bare, err := egressclient.NewForConfig(a.clientConfig(b.opts.kubeQPS, nil))
	if err != nil {
		return wrap("client", err)
	}
	written, bareTime, err := a.writeHosts(ctx, bare, hosts)
	if err != nil {
		return wrap("bare client", err)
	}

	r.seconds("master: informers synced → every status.host written", masterTime)
	r.seconds("master: informer list (start → synced)", st.synced.Sub(st.started))
	r.metric("master: status writes", float64(stats.StatusWrites), "writes")
	r.metric("master: status conflicts", float64(stats.Conflicts), "conflicts")
	r.metric("master: node label patches", float64(stats.LabelPatches), "patches")
	r.metric("master: API requests, status updates", float64(reqs["PUT egressservices/status"]), "requests")
	r.metric("master: API requests, Events", float64(reqs["POST events"]+reqs["PATCH events"]), "requests")
	r.metric("master: API requests, node patches", float64(reqs["PATCH nodes"]), "requests")
	r.seconds("bare client: same writes", bareTime)
	r.metric("bare client: status writes", float64(written), "writes")
	r.metric("hosts used", float64(len(perHost)), "nodes")
	r.Details["master_requests"] = reqs
	r.Details["services_per_host"] = perHost
	qps := "unlimited"
	if b.opts.kubeQPS > 0 {
		qps = fmt.Sprintf("%.0f", b.opts.kubeQPS)
	}
	r.note("both clients: client-side QPS %s, %d parallel writers; the master also posts one Event per decision through the same client", qps, writers)
	rt := ratio(masterTime.Seconds(), bareTime.Seconds())
	r.check("host selection: master vs bare client, same writes", rt, "×", "<=", 1.5,
		fmt.Sprintf("%s vs %s = %.2f×", sec(masterTime), sec(bareTime), rt), "≤ 1.5×")
	return nil
}
