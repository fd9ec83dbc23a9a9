package master_test

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/zone"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// icMaster starts an interconnect master (no NB) with controllers, until
// the test ends.
func icMaster(t *testing.T, lease string, controllers ...string) *master.Master {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := master.Config{Mode: master.ModeIC, Controllers: controllers, ConflictClearAfter: time.Second,
		LeaderElection: master.LeaderElection{Enabled: true, Namespace: "ovn-egress", Name: lease,
			Identity: lease + "-" + fmt.Sprint(time.Now().UnixNano()), LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}}
	cfg.Translation.Translate = translate.DefaultConfig()
	m, err := master.New(ctx, cfg, kube.Config, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("master: %v", err)
		}
	})
	return m
}

// eventually polls cond for up to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// freshReports gives every node an empty readiness report (the agent's
// ConfigMap, which the zone's verdict goes into), and again when the test
// ends: a verdict must not outlive the test that caused it.
func freshReports(t *testing.T, topo testenv.Topology) {
	for _, n := range topo.Nodes {
		kube.SetReport(t, n.Name, translate.Report{})
		t.Cleanup(func() { kube.SetReport(t, n.Name, translate.Report{}) })
	}
}

// TestZonesStandTheICMasterBack: ovn-kubernetes' egress-service leftovers
// in one zone's NB (its feature turned off, `migrate --apply` not run yet)
// stand that zone back — and, through the zone's verdict in its node's
// report, the interconnect master too: it moves no host while the stale
// rows still send the pods to the old host, whose agent would otherwise
// withdraw its SNAT (seen with the real binaries: 18 s without egress until
// migrate). After `migrate --apply`, the master resumes and moves the host.
func TestZonesStandTheICMasterBack(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	zones := testenv.NewZones(t, topo)
	kube.CreateNodes(t, topo)
	freshReports(t, topo)
	ns := kube.Namespace(t)
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, ns, "web", "node2")
	// The leftover in zone node1: its reroute of the pod to node2's transit
	// address and its served-pods set, as ovnkube wrote them.
	z1 := zones["node1"]
	z1.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=101", `match="ip4.src == 10.244.1.5"`,
		"action=reroute", `nexthops="100.88.0.3"`, `external_ids:EgressSVC="`+ns+`/web"`,
		"--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	z1.MustNBCtl(t, "create", "Address_Set", "name=a13607449821398607916", `addresses="10.244.1.5"`,
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressService"`,
		`external_ids:"k8s.ovn.org/name"="egresssvc-served-pods"`, `external_ids:"ip-family"="v4"`)

	ctx, cancel := context.WithCancel(context.Background())
	done := runZones(ctx, t, topo, zones, zone.Clients{Kube: kube.Client, Egress: kube.Egress})
	defer func() {
		cancel()
		for range zones {
			if err := <-done; err != nil {
				t.Errorf("zone: %v", err)
			}
		}
	}()
	m := icMaster(t, "ic-standback", master.ControllerSelection)
	eventually(t, "the master standing back by zone node1's verdict", func() bool {
		c := m.Conflict()
		return c.Active() && len(c.Zones) == 1 && c.Zones[0] == "node1"
	})
	if s := m.Conflict().String(); !strings.Contains(s, "zone(s) (node1)") || !strings.Contains(s, "ovn-egress migrate --apply") {
		t.Errorf("the conflict does not say where and what to do: %s", s)
	}

	// The selector no longer matches the host: the master moves nothing.
	before := m.Select().Stats()
	label(t, "node3", "egress", "yes")
	es, err := kube.Egress.K8sV1().EgressServices(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}}
	if _, err := kube.Egress.K8sV1().EgressServices(ns).Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a blocked selection", func() bool { return m.Select().Stats().Blocked > before.Blocked })
	if h := hostOf(t, ns, "web"); h != "node2" {
		t.Fatalf("the master moved the host to %q while a zone stood back", h)
	}

	// migrate --apply on zone node1: the master resumes and moves it.
	nb, err := ovn.NewNBClient(ctx, ovn.ClientConfig{Addresses: []string{z1.NBAddress()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	ls, err := ovn.Leftovers(ctx, nb)
	if err != nil || len(ls) != 2 {
		t.Fatalf("leftovers %v (%v); want the policy and the set", ls, err)
	}
	if err := ovn.RemoveLeftovers(ctx, nb, ls); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the host moved to node3", func() bool { return hostOf(t, ns, "web") == "node3" })
	if m.Conflict().Active() {
		t.Errorf("still standing back: %s", m.Conflict())
	}
}

// TestEgressIPBesideOVNKubeEgressIP: ovn-kubernetes' EgressIP no-reroute
// policies alone (left by its egress-service feature) block nothing: the
// zones write ovn-egress's EgressIP rows (before: refused forever, with the
// remedy "disable --enable-egress-ip", already disabled). Once ovn-kubernetes'
// EgressIP serves a pod in a zone (its reroute and served-pods set), that
// zone withdraws the EgressIP rows it wrote (two reroutes of one pod to two
// nodes were seen), says so in an Event on the EgressIP and in its
// readiness, and reports it: the interconnect master's EgressIP assignment
// writes no status meanwhile. Gone, everything resumes.
func TestEgressIPBesideOVNKubeEgressIP(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	zones := testenv.NewZones(t, topo)
	kube.CreateNodes(t, topo)
	freshReports(t, topo)
	ns := kube.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eips, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("both-%d", time.Now().UnixNano())
	podIP := topo.Nodes[0].PodIP(ipfamily.V4, 5)
	kube.RunPod(t, ns, "client", "node1", map[string]string{"app": app}, []netip.Addr{podIP})
	noReroute := func(z *testenv.OVN) {
		for _, name := range []string{"EIP-No-Reroute-Pod-To-Pod", "EIP-No-Reroute-Pod-To-Join", "EIP-No-Reroute-Pod-To-Node", "EIP-No-Reroute-Service"} {
			z.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=102", `match="ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16"`,
				"action=allow", `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
				`external_ids:"k8s.ovn.org/name"="`+name+`"`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
		}
	}
	for _, z := range zones {
		noReroute(z)
	}
	const ip = "172.18.0.251"
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "both-" + ns}, Spec: egressipv1.EgressIPSpec{EgressIPs: []string{ip},
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	if e, err = eips.K8sV1().EgressIPs().Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })
	e.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "node3", EgressIP: ip}} // as the master assigns it
	if e, err = eips.K8sV1().EgressIPs().Update(ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := runZones(ctx, t, topo, zones, zone.Clients{Kube: kube.Client, Egress: kube.Egress, EgressIP: eips})
	defer func() {
		cancel()
		for range zones {
			if err := <-done; err != nil {
				t.Errorf("zone: %v", err)
			}
		}
	}()
	z1 := zones["node1"]
	reroute := func() string {
		return strings.TrimSpace(z1.MustNBCtl(t, "--bare", "--columns=nexthops", "find", "Logical_Router_Policy", "external_ids:k8s.ovn.org/name="+e.Name))
	}
	eventually(t, "ovn-egress's EgressIP reroute in zone node1 beside the no-reroute leftovers", func() bool { return reroute() != "" })

	// ovn-kubernetes' EgressIP serves the pod in zone node1.
	z1.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=100", fmt.Sprintf(`match="ip4.src == %s"`, podIP),
		"action=reroute", `nexthops="100.88.0.3"`, `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`,
		`external_ids:"k8s.ovn.org/owner-type"="EgressIP"`, `external_ids:"k8s.ovn.org/name"="`+e.Name+"_"+ns+`/client"`,
		"--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	eventually(t, "zone node1's EgressIP rows withdrawn", func() bool { return reroute() == "" })
	eventually(t, "the Event on the EgressIP", func() bool {
		evs, err := kube.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + e.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == coexist.Reason && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, "--enable-egress-ip=false") {
				return true
			}
		}
		return false
	})
	label(t, "node3", egressip.LabelEgressAssignable, "")
	m := icMaster(t, "ic-eip-standback", master.ControllerSelection, master.ControllerEgressIP)
	eventually(t, "the master's EgressIP standing back by zone node1's verdict", func() bool {
		c := m.Conflict()
		return c.EgressIPActive() && len(c.EgressIPZones) == 1 && c.EgressIPZones[0] == "node1" && !c.Active()
	})
	// node3 stops being an egress node: the master assigns nothing now.
	before := m.EgressIP().Stats()
	if _, err := kube.Client.CoreV1().Nodes().Patch(ctx, "node3", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a blocked assignment", func() bool { return m.EgressIP().Stats().Blocked > before.Blocked })
	if cur, err := eips.K8sV1().EgressIPs().Get(ctx, e.Name, metav1.GetOptions{}); err != nil || len(cur.Status.Items) != 1 || cur.Status.Items[0].Node != "node3" {
		t.Errorf("the master wrote EgressIP status while ovn-kubernetes' EgressIP serves: %+v (%v)", cur.Status, err)
	}

	// node3 is an egress node again, ovn-kubernetes' EgressIP goes: the
	// zone writes its rows again.
	label(t, "node3", egressip.LabelEgressAssignable, "")
	u := strings.TrimSpace(z1.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy", "priority=100", `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`))
	z1.MustNBCtl(t, "remove", "Logical_Router", "ovn_cluster_router", "policies", u)
	eventually(t, "ovn-egress's reroute back", func() bool { return reroute() != "" })
	eventually(t, "the master's EgressIP standoff over", func() bool { return !m.Conflict().EgressIPActive() })
}

func hostOf(t *testing.T, ns, name string) string {
	t.Helper()
	es, err := kube.Egress.K8sV1().EgressServices(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return es.Status.Host
}

// label sets a node label for the test.
func label(t *testing.T, node, k, v string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, k, v)
	if _, err := kube.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, k)
		_, _ = kube.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	})
}
