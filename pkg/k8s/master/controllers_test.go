package master_test

import (
	"context"
	"errors"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
)

// TestControllersSplitAcrossTwoMasters: --controllers splits the master
// into a selecting one and a translating one, each under its own Lease:
// the first writes status.host and the label and never NB, the second
// writes the NB rows and never status; stopping the translator leaves NB
// as it was while hosts keep being chosen.
func TestControllersSplitAcrossTwoMasters(t *testing.T) {
	c := newCluster(t)
	sel := c.config("split-select")
	sel.Controllers = []string{master.ControllerSelection}
	sel.Select = selection.Config{HealthInterval: 100 * time.Millisecond, Prober: allReachable{}}
	sel.Translation.Translate.AssumeAgentsReady = true
	xl := c.config("split-translate")
	xl.Controllers = []string{master.ControllerTranslation}
	xl.Translation.Translate.AssumeAgentsReady = true
	ms, _ := c.start(sel, kube.Config)
	mt, stopXL := c.start(xl, kube.Config)
	if ms.Translation() != nil || ms.Select() == nil || mt.Select() != nil || mt.Translation() == nil {
		t.Fatalf("controllers: selecting master runs sync=%v select=%v; translating master sync=%v select=%v",
			ms.Translation() != nil, ms.Select() != nil, mt.Translation() != nil, mt.Select() != nil)
	}

	c.createService("web", "172.18.0.100", "10.244.1.5@node1")
	c.eventually("status.host", func() bool { return c.host("web") != "" })
	host := c.host("web")
	c.eventually("the host's set", func() bool { return c.setAddresses(host) == `["10.244.1.5"]` })
	// The label is written by the selecting master's node sync, apart from
	// the set the other master writes: wait for it too.
	c.eventually("the label on the host alone", func() bool {
		l := c.egressLabels()
		return len(l) == 1 && l[hosts.NodeLabel(c.ns, "web")] == host
	})
	if n := mt.Translation().Stats().Transactions; n == 0 {
		t.Errorf("the translating master wrote no NB transaction")
	}

	// The translator stops: the selector still picks a host for a new
	// service, and no NB row appears for it.
	stopXL()
	c.createService("api", "172.18.0.101", "10.244.2.6@node2")
	c.eventually("status.host of api", func() bool { return c.host("api") != "" })
	time.Sleep(300 * time.Millisecond)
	for _, n := range c.topo.Nodes {
		if strings.Contains(c.setAddresses(n.Name), "10.244.2.6") {
			t.Errorf("api's endpoint is in %s's set with no translator running", n.Name)
		}
	}
}

// TestControllersConfig: unknown controllers and translation without a
// central NB are refused before anything connects.
func TestControllersConfig(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct {
		mode        string
		controllers []string
		want        string
	}{
		{master.ModeCentral, []string{"selection", "egressqos"}, `unknown controller "egressqos"`},
		{master.ModeIC, []string{master.ControllerTranslation}, "needs the central mode"},
	} {
		cfg := c.config("refused")
		cfg.Mode, cfg.Controllers = tc.mode, tc.controllers
		_, err := master.New(context.Background(), cfg, kube.Config, testLogger(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mode %s, controllers %v: error %v, want %q", tc.mode, tc.controllers, err, tc.want)
		}
	}
}

// TestLostLeaseEndsTheProcess: a replica whose Lease is taken over returns
// from Run at once with an error (the process exits and its Deployment
// starts a clean standby), instead of hanging in its shutdown.
func TestLostLeaseEndsTheProcess(t *testing.T) {
	c := newCluster(t)
	cfg := c.config("lost-lease")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := master.New(ctx, cfg, kube.Config, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	leases := kube.Client.CoordinationV1().Leases("ovn-egress")
	c.eventually("the Lease held", func() bool {
		l, err := leases.Get(ctx, "lost-lease", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == cfg.LeaderElection.Identity
	})
	// Another replica takes the Lease (as after a network partition). The
	// holder renews it meanwhile: a conflict re-reads it and tries again.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, "lost-lease", metav1.GetOptions{})
		if err != nil {
			return err
		}
		other, now := "someone-else", metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.AcquireTime, l.Spec.RenewTime = &other, &now, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "lost the leader lease") {
			t.Errorf("Run returned %v, want the lost Lease", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the replica that lost its Lease is still running 15 s later")
	}
}

// TestEgressIPControllerIsOptIn: the master runs the EgressIP controller
// only when --controllers names it; then an EgressIP gets status.items on
// an egress-assignable node, the health checks probe that node although it
// hosts no EgressService, and when it stops answering the IP moves to the
// other egress node.
func TestEgressIPControllerIsOptIn(t *testing.T) {
	c := newCluster(t)
	def, stopDef := c.start(c.config("eip-default"), kube.Config)
	if def.EgressIP() != nil {
		t.Errorf("the default master runs the EgressIP controller")
	}
	stopDef()

	nodes := kube.Client.CoreV1().Nodes()
	label := func(node string, on bool) {
		patch := `{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":null}}}`
		if on {
			patch = `{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`
		}
		if _, err := nodes.Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"node2", "node3"} {
		label(n, true)
		t.Cleanup(func() { label(n, false) })
	}
	prober := &deadNodes{dead: map[string]bool{}, probed: map[string]bool{}}
	cfg := c.config("eip-named")
	cfg.Controllers = []string{master.ControllerSelection, master.ControllerEgressIP}
	cfg.Select = selection.Config{HealthInterval: 50 * time.Millisecond, Prober: prober}
	m, _ := c.start(cfg, kube.Config)
	if m.EgressIP() == nil || m.Select() == nil || m.Translation() != nil {
		t.Fatalf("controllers: egressip=%v select=%v sync=%v; want egressip and selection", m.EgressIP() != nil, m.Select() != nil, m.Translation() != nil)
	}
	eips, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "opt-in"}, Spec: egressipv1.EgressIPSpec{
		EgressIPs: []string{"172.18.0.250"}, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}
	if _, err := eips.K8sV1().EgressIPs().Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), "opt-in", metav1.DeleteOptions{}) })
	on := func(node string) func() bool {
		return func() bool {
			got, err := eips.K8sV1().EgressIPs().Get(context.Background(), "opt-in", metav1.GetOptions{})
			return err == nil && len(got.Status.Items) == 1 && got.Status.Items[0] == egressipv1.EgressIPStatusItem{Node: node, EgressIP: "172.18.0.250"}
		}
	}
	c.eventually("status.items on node2", on("node2"))
	c.eventually("node2 probed", func() bool { return prober.wasProbed("node2") })
	prober.kill("node2")
	c.eventually("status.items on node3 once node2 stops answering", on("node3"))
}

// deadNodes answers every probe but those of the nodes killed.
type deadNodes struct {
	mu           sync.Mutex
	dead, probed map[string]bool
}

func (p *deadNodes) Probe(_ context.Context, node string, _ []netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed[node] = true
	if p.dead[node] {
		return errors.New("no answer")
	}
	return nil
}

func (p *deadNodes) kill(node string) { p.mu.Lock(); p.dead[node] = true; p.mu.Unlock() }

func (p *deadNodes) wasProbed(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probed[node]
}
