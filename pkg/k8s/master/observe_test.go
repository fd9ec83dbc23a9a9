package master_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestReadinessFollowsNB: a master's /readyz is 200 once its caches synced
// and its NB is connected, 503 naming the NB while the NB is down, and 200
// again after the NB returns — a standby's too (ready to take the Lease).
// /metrics follows: ovn_egress_nb_connected, ovn_egress_master_leader, and
// the NB transactions of the rows written, libovsdb's disconnects.
func TestReadinessFollowsNB(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node3")
	kube.SetReport(t, "node3", translate.Report{c.ns + "/web": kube.ReportFor(t, "node3", c.ns, "web", c.topo.ClusterSubnets)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func() string {
		obs := observe.New(observe.Config{Address: "127.0.0.1:0"}, testLogger(t))
		if err := obs.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cfg := c.config("readiness")
		cfg.Observe = obs
		c.start(cfg, kube.Config)
		return "http://" + obs.Addr().String()
	}
	leader := start()
	c.eventually("rows", func() bool { return c.setAddresses("node3") == `["10.244.1.5"]` })
	standby := start()

	status := func(base string) (int, string) {
		code, body, err := testenv.HTTPGet(ctx, base+"/readyz")
		if err != nil {
			t.Fatal(err)
		}
		return code, body
	}
	waitReady := func(base string, want int, contains string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := status(base)
			if code == want && strings.Contains(body, contains) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/readyz: %d %q; want %d containing %q", base, code, body, want, contains)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	metric := func(base, name string, labels ...string) (float64, bool) {
		t.Helper()
		m, err := testenv.Scrape(ctx, base+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "*") {
			return m.Sum(strings.TrimSuffix(name, "*")), true
		}
		return m.Get(name, labels...)
	}
	for _, base := range []string{leader, standby} {
		waitReady(base, 200, "ok")
		if v, ok := metric(base, "ovn_egress_nb_connected", "endpoint", c.ovn.NBAddress()); !ok || v != 1 {
			t.Errorf("%s: ovn_egress_nb_connected{endpoint=%s} = %v (%v), want 1", base, c.ovn.NBAddress(), v, ok)
		}
	}
	if v, _ := metric(leader, "ovn_egress_master_leader"); v != 1 {
		t.Errorf("leader: ovn_egress_master_leader = %v, want 1", v)
	}
	if v, _ := metric(standby, "ovn_egress_master_leader"); v != 0 {
		t.Errorf("standby: ovn_egress_master_leader = %v, want 0", v)
	}
	if v, _ := metric(leader, "ovn_egress_nb_transactions_total", "result", "ok"); v < 1 {
		t.Errorf("leader: ovn_egress_nb_transactions_total{result=ok} = %v after writing the rows", v)
	}
	if v, _ := metric(leader, "ovn_egress_controller_sync_duration_seconds_count", "controller", "translation"); v < 1 {
		t.Errorf("leader: no translation sync recorded")
	}

	c.ovn.StopNB()
	for _, base := range []string{leader, standby} {
		waitReady(base, 503, "NB not connected")
		if v, ok := metric(base, "ovn_egress_nb_connected", "endpoint", ""); !ok || v != 0 {
			t.Errorf("%s: ovn_egress_nb_connected{endpoint=\"\"} = %v (%v) with the NB down, want 0", base, v, ok)
		}
	}
	if code, _, _ := testenv.HTTPGet(ctx, leader+"/healthz"); code != 200 {
		t.Errorf("/healthz %d while the NB is down: liveness must not restart a master that waits for its NB", code)
	}
	if err := c.ovn.StartNB(); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{leader, standby} {
		waitReady(base, 200, "ok")
		if v, _ := metric(base, "ovn_egress_nb_client_disconnects_total*"); v < 1 {
			t.Errorf("%s: ovn_egress_nb_client_disconnects_total = %v after the NB restarted, want ≥ 1", base, v)
		}
	}
}
