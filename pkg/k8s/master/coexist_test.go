package master_test

import (
	"context"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
)

// conflictEvent waits for the Warning Event of a conflict on EgressService
// name whose message holds every one of want.
func (c *cluster) conflictEvent(name string, want ...string) {
	c.t.Helper()
	c.warningEvent(name, coexist.Reason, want...)
}

// warningEvent waits for a Warning Event of reason on EgressService name
// whose message holds every one of want.
func (c *cluster) warningEvent(name, reason string, want ...string) {
	c.t.Helper()
	es, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.eventually(reason+" event", func() bool {
		evs, err := kube.Client.CoreV1().Events(c.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(es.UID)})
		if err != nil {
			c.t.Fatal(err)
		}
		for _, ev := range evs.Items {
			ok := ev.Reason == reason && ev.Type == "Warning"
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
		return (sync < 0 || m.Translation().Stats().Blocked > sync) && (sel < 0 || m.Select().Stats().Blocked > sel)
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
	cfg.Translation.Translate.AssumeAgentsReady = true
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
	if got := c.waitCondition("web", conditions.Ready, metav1.ConditionFalse, conditions.ReasonStandingBack); !strings.Contains(got.Message, "--enable-egress-service=false") {
		t.Errorf("Ready during the conflict: %q; want the flag named", got.Message)
	}
	if err := cfg.Observe.IsReady(); err == nil || !strings.Contains(err.Error(), "standing back") || !strings.Contains(err.Error(), "--enable-egress-service=false") {
		t.Errorf("readiness during the conflict: %v; want not ready, standing back, naming the flag", err)
	}

	// Meanwhile nothing is written: the endpoint change stays out of NB, and
	// a host left by the selector keeps its status and label.
	before, beforeSel := m.Translation().Stats(), m.Select().Stats()
	kube.SetEndpoints(t, c.ns, "web", "10.244.3.7@node3")
	c.label("node2", "egress", "no") // a label change on the host makes selection decide its services again
	blockedSince(c, m, before.Blocked, beforeSel.Blocked)
	if got := c.setAddresses("node2"); got != `["10.244.1.5"]` {
		t.Errorf("the master wrote NB during the conflict: node2's set %s", got)
	}
	if st := m.Translation().Stats(); st.Transactions != before.Transactions {
		t.Errorf("%d NB transactions during the conflict", st.Transactions-before.Transactions)
	}

	// ovn-kubernetes' feature turned off and its leftovers removed: resume.
	for _, u := range strings.Fields(c.ovn.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy", `external_ids:EgressSVC="`+c.ns+`/web"`)) {
		c.ovn.MustNBCtl(t, "remove", "Logical_Router", "ovn_cluster_router", "policies", u)
	}
	c.ovn.MustNBCtl(t, "destroy", "Address_Set", "a13607449821398607916")
	c.eventually("resumed", func() bool { return !m.Conflict().Active() && c.setAddresses("node2") == `["10.244.3.7"]` })
	c.eventually("Ready no longer says the master stands back", func() bool {
		got := c.condition("web", conditions.Ready)
		return got.Reason != "" && got.Reason != conditions.ReasonStandingBack
	})
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

// TestHoldsAServiceWrittenByOVNKube: ovn-kubernetes' cluster-manager
// writes status.host as the real binary does (a Get and an Update of
// /status, its user agent "<host>/ovnkube@<commit>", so its field manager is
// the host's name, here "control-plane-1"). The master holds that one
// service — neither its status.host nor its node label is written back,
// though the selector now excludes the host — with a Warning Event naming
// the manager and the way out, while another service is still placed; no
// standoff. `ovn-egress migrate --status --apply` takes the field over
// (value unchanged) and the master decides again at once.
// (Before: only a manager starting with "ovnkube" was recognised; the real
// one was not, and the two masters fought over status.host and the label.)
func TestHoldsAServiceWrittenByOVNKube(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfg := c.config("hold-status")
	cfg.Translation.Translate.AssumeAgentsReady = true
	m, _ := c.start(cfg, kube.Config)
	c.eventually("the set", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })
	c.eventually("label on node2", func() bool { return c.egressLabels()[hosts.NodeLabel(c.ns, "web")] == "node2" })

	ovnkube := rest.CopyConfig(kube.Config)
	ovnkube.UserAgent = "control-plane-1/ovnkube@8871cd9c (linux/amd64) kubernetes/v0.0.0"
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
	c.eventually("the hold", func() bool { st := m.Conflict(); return len(st.Held) == 1 && st.Held[0] == c.ns+"/web" })
	if m.Conflict().Active() {
		t.Errorf("a status writer stands the master back: %s", m.Conflict())
	}
	c.warningEvent("web", coexist.ReasonHeld, `"control-plane-1"`, "migrate --apply")
	// The selector no longer matches node3: the master would move the
	// service, but it is held.
	before := m.Select().Stats()
	c.label("node3", "egress", "no")
	c.label("node1", "egress", "yes")
	es, err = kube.Egress.K8sV1().EgressServices(c.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}}
	if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Update(context.Background(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("a held decision", func() bool { return m.Select().Stats().Held > before.Held })
	if h := c.host("web"); h != "node3" {
		t.Errorf("the master rewrote the held status.host to %q", h)
	}
	if l := c.egressLabels()[hosts.NodeLabel(c.ns, "web")]; l != "node2" {
		t.Errorf("the held service's label moved to %q; want it left on node2", l)
	}
	// Another service is placed meanwhile: no standoff.
	kube.CreateLoadBalancer(t, c.ns, "api", []string{"172.18.0.101"}, "10.244.1.6@node1")
	if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Create(context.Background(), testenv.EgressService(c.ns, "api", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("api placed", func() bool { return c.host("api") != "" })

	// The way out: migrate takes the field over; the master decides again.
	held, objs, err := coexist.ForeignStatuses(context.Background(), kube.Egress)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, h := range held {
		if h.Key == c.ns+"/web" {
			found = true
			if h.Writer.Manager != "control-plane-1" || h.Host != "node3" {
				t.Errorf("held %+v; want node3 written by control-plane-1", h)
			}
			if err := coexist.TakeOver(context.Background(), kube.Egress, objs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !found {
		t.Fatalf("migrate's listing %+v lacks %s/web", held, c.ns)
	}
	c.eventually("released", func() bool { return len(m.Conflict().Held) == 0 })
	c.eventually("web moved to node1 by the master, its label with it", func() bool {
		return c.host("web") == "node1" && c.egressLabels()[hosts.NodeLabel(c.ns, "web")] == "node1"
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
	cfg.Translation.Translate.AssumeAgentsReady = true
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

// TestStandoffOutlastsABlink: ovn-kubernetes deletes its egress-service
// rows and writes them again while it moves a host (seen with the real
// binaries: both zones resumed for the blink, wrote, stood back again and
// ended half-moved). A conflict that is gone for less than
// ConflictClearAfter is not gone: nothing is written across the blink; once
// it stays gone, the master resumes.
func TestStandoffOutlastsABlink(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfg := c.config("blink")
	cfg.Translation.Translate.AssumeAgentsReady = true
	cfg.ConflictClearAfter = 2 * time.Second
	m, _ := c.start(cfg, kube.Config)
	c.eventually("the set", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })

	add := func() string {
		return strings.TrimSpace(c.ovn.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=101", `match="ip4.src == 10.244.1.5"`,
			"action=reroute", `nexthops="10.244.3.2"`, `external_ids:EgressSVC="`+c.ns+`/web"`,
			"--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p"))
	}
	del := func(u string) { c.ovn.MustNBCtl(t, "remove", "Logical_Router", "ovn_cluster_router", "policies", u) }
	u := add()
	c.eventually("the conflict", func() bool { return m.Conflict().Active() })
	kube.SetEndpoints(t, c.ns, "web", "10.244.3.7@node3") // a change the master would write
	before := m.Translation().Stats()

	// The blink: gone for half a second, back (a new row, as ovnkube
	// writes it), for a few rounds.
	for range 3 {
		del(u)
		time.Sleep(500 * time.Millisecond)
		u = add()
		time.Sleep(300 * time.Millisecond)
	}
	if !m.Conflict().Active() {
		t.Errorf("the standoff ended during the blink")
	}
	if st := m.Translation().Stats(); st.Transactions != before.Transactions {
		t.Errorf("%d NB transactions during the blink", st.Transactions-before.Transactions)
	}
	if got := c.setAddresses("node2"); got != `["10.244.1.5"]` {
		t.Errorf("the master wrote during the blink: node2's set %s", got)
	}
	del(u)
	c.eventually("resumed once gone for good", func() bool { return !m.Conflict().Active() && c.setAddresses("node2") == `["10.244.3.7"]` })
}
