package master_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// conflictEvent waits for the Warning Event of a conflict on EgressService
// name whose message holds every one of want.
func (c *cluster) conflictEvent(name string, want ...string) {
	c.t.Helper()
	es, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.eventually(coexist.Reason+" event", func() bool {
		evs, err := kube.Client.CoreV1().Events(c.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(es.UID)})
		if err != nil {
			c.t.Fatal(err)
		}
		for _, ev := range evs.Items {
			ok := ev.Reason == coexist.Reason && ev.Type == "Warning"
			for _, w := range want {
				ok = ok && strings.Contains(ev.Message, w)
			}
			if ok {
				return true
			}
		}
		return false
	})
}

// blockedSince waits until the controllers have passed on a sync since the
// counters given (-1: that controller is not waited for), so that a
// "nothing written" check means something.
func blockedSince(c *cluster, m *master.Master, sync, sel int) {
	c.t.Helper()
	c.eventually("a blocked sync", func() bool {
		return (sync < 0 || m.Sync().Stats().Blocked > sync) && (sel < 0 || m.Select().Stats().Blocked > sel)
	})
}

// TestStandsBackFromOVNKubernetesRows: ovn-kubernetes' own egress-service
// rows in NB (an EgressSVC reroute at 101, its egresssvc-served-pods set
// filled) make the master write nothing — no NB row, no status.host, no
// label — say what it found and what to do (log and Event), and resume by
// itself once the rows are gone.
func TestStandsBackFromOVNKubernetesRows(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfg := c.config("standback")
	cfg.Sync.Translate.AssumeAgentsReady = true
	cfg.Observe = observe.New(observe.Config{}, testLogger(t))
	m, _ := c.start(cfg, kube.Config)
	c.eventually("the set", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })
	c.eventually("ready", func() bool { return cfg.Observe.IsReady() == nil })

	// ovn-kubernetes (--enable-egress-service=true) writes its per-endpoint
	// reroute and its served-pods set, exactly as it names them.
	c.ovn.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=101", `match="ip4.src == 10.244.1.5"`,
		"action=reroute", `nexthops="10.244.2.2"`, `external_ids:EgressSVC="`+c.ns+`/web"`,
		"--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	c.ovn.MustNBCtl(t, "create", "Address_Set", "name=a13607449821398607916", `addresses="10.244.1.5"`,
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressService"`,
		`external_ids:"k8s.ovn.org/name"="egresssvc-served-pods"`, `external_ids:"ip-family"="v4"`)
	c.eventually("the conflict", func() bool { st := m.Conflict(); return st.EgressSVCPolicies > 0 && st.ServedPods > 0 })
	got := m.Conflict()
	if got.EgressSVCPolicies != 1 || got.ServedPods != 1 || len(got.Services) != 1 || got.Services[0] != c.ns+"/web" {
		t.Errorf("conflict %+v; want 1 EgressSVC policy, 1 served pod, naming %s/web", got, c.ns)
	}
	c.conflictEvent("web", "EgressSVC", "--enable-egress-service=false", "ovn-egress migrate")
	if err := cfg.Observe.IsReady(); err == nil || !strings.Contains(err.Error(), "standing back") || !strings.Contains(err.Error(), "--enable-egress-service=false") {
		t.Errorf("readiness during the conflict: %v; want not ready, standing back, naming the flag", err)
	}

	// Meanwhile nothing is written: the endpoint change stays out of NB, and
	// a host left by the selector keeps its status and label.
	before, beforeSel := m.Sync().Stats(), m.Select().Stats()
	kube.SetEndpoints(t, c.ns, "web", "10.244.3.7@node3")
	c.label("node2", "egress", "no") // a label change on the host makes selection decide its services again
	blockedSince(c, m, before.Blocked, beforeSel.Blocked)
	if got := c.setAddresses("node2"); got != `["10.244.1.5"]` {
		t.Errorf("the master wrote NB during the conflict: node2's set %s", got)
	}
	if st := m.Sync().Stats(); st.Transactions != before.Transactions {
		t.Errorf("%d NB transactions during the conflict", st.Transactions-before.Transactions)
	}

	// ovn-kubernetes' feature turned off and its leftovers removed: resume.
	for _, u := range strings.Fields(c.ovn.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy", `external_ids:EgressSVC="`+c.ns+`/web"`)) {
		c.ovn.MustNBCtl(t, "remove", "Logical_Router", "ovn_cluster_router", "policies", u)
	}
	c.ovn.MustNBCtl(t, "destroy", "Address_Set", "a13607449821398607916")
	c.eventually("resumed", func() bool { return !m.Conflict().Active() && c.setAddresses("node2") == `["10.244.3.7"]` })
	if err := cfg.Observe.IsReady(); err != nil {
		t.Errorf("not ready after resuming: %v", err)
	}
}

// label sets (or, with "", removes) a node label.
func (c *cluster) label(node, k, v string) {
	c.t.Helper()
	n, err := kube.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if v == "" {
		delete(n.Labels, k)
	} else {
		n.Labels[k] = v
	}
	if _, err := kube.Client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		n, err := kube.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && n.Labels[k] != "" {
			delete(n.Labels, k)
			_, _ = kube.Client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		}
	})
}

// TestStandsBackFromOVNKubernetesStatusWrites: ovn-kubernetes'
// cluster-manager writing status.host (its manager is "ovnkube") is seen
// in managedFields; the master does not write it back, and resumes once
// ovn-egress's own choice is the last write again.
func TestStandsBackFromOVNKubernetesStatusWrites(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfg := c.config("standback-status")
	cfg.Sync.Translate.AssumeAgentsReady = true
	m, _ := c.start(cfg, kube.Config)
	c.eventually("the set", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })

	ovnkube := rest.CopyConfig(kube.Config)
	ovnkube.UserAgent = "ovnkube/v1.3.0 (linux/amd64) kubernetes/8871cd9"
	ovnk, err := egressclient.NewForConfig(ovnkube)
	if err != nil {
		t.Fatal(err)
	}
	es, err := ovnk.K8sV1().EgressServices(c.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Status.Host = "node3"
	if _, err := ovnk.K8sV1().EgressServices(c.ns).UpdateStatus(context.Background(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the conflict", func() bool {
		st := m.Conflict()
		return st.Active() && len(st.StatusWriters) == 1 && st.StatusWriters[0] == c.ns+"/web"
	})
	c.conflictEvent("web", "status.host", coexist.Manager, "--enable-egress-service=false")
	before := m.Select().Stats()
	c.label("node3", "egress", "no") // a label change on the host makes selection decide its services again
	blockedSince(c, m, -1, before.Blocked)
	time.Sleep(200 * time.Millisecond) // a write would have been made by now
	if h := c.host("web"); h != "node3" {
		t.Errorf("the master rewrote status.host to %q during the conflict", h)
	}
	if st := m.Select().Stats(); st.StatusWrites != before.StatusWrites || st.LabelPatches != before.LabelPatches {
		t.Errorf("host selection wrote during the conflict: %+v → %+v", before, st)
	}
	if got := c.setAddresses("node3"); got != "" {
		t.Errorf("the master translated ovn-kubernetes' choice: node3's set %s", got)
	}

	// The operator turned ovn-kubernetes' feature off and wrote the host
	// back (here: by hand, with another manager): ovn-egress resumes.
	kube.SetHost(t, c.ns, "web", "node2")
	c.eventually("resumed", func() bool { return !m.Conflict().Active() })
	c.eventually("label back on node2", func() bool {
		return c.egressLabels()[translate.NodeLabel(c.ns, "web")] == "node2"
	})
}

// TestCentralMasterRefusesAnInterconnectZone: a central master pointed at
// one interconnect zone's NB (a transit switch with a remote port) writes
// nothing and says to run with --mode=ic, instead of writing reroutes the
// zone's northd cannot use.
func TestCentralMasterRefusesAnInterconnectZone(t *testing.T) {
	c := newCluster(t)
	c.ovn.MustNBCtl(t, "ls-add", "transit_switch", "--", "lsp-add", "transit_switch", "tstor-node3",
		"--", "lsp-set-type", "tstor-node3", "remote")
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfg := c.config("standback-ic")
	cfg.Sync.Translate.AssumeAgentsReady = true
	m, _ := c.start(cfg, kube.Config)
	c.eventually("the conflict", func() bool { return m.Conflict().InterconnectNB })
	blockedSince(c, m, 0, 0)
	if got := c.setAddresses("node2"); got != "" {
		t.Errorf("a central master wrote into an interconnect zone's NB: %s", got)
	}
	if s := m.Conflict().String(); !strings.Contains(s, "--mode=ic") {
		t.Errorf("the conflict does not say what to do: %s", s)
	}
}
