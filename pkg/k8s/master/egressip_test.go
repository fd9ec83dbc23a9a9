package master_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
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
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
)

// TestEgressIPRowsFollowTheAssignment runs the master with the EgressIP
// controller, as the dist RBAC's ServiceAccount, on a real API server and NB: an EgressIP selecting a
// namespace's running pod is assigned to an egress node, and NB gets the
// pod's address set, the reroute to that node's gateway router and the
// SNAT to the IP there (read back with ovn-nbctl). The namespace losing its
// label removes the rows; the node stopping to answer moves reroute and
// SNAT to the other node; deleting the EgressIP sweeps everything.
func TestEgressIPRowsFollowTheAssignment(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	egressAssignable(t, "node2", "node3")
	team := fmt.Sprintf("rows-%d", time.Now().UnixNano()) // namespaces outlive tests here: a label no other test uses
	labelNamespace := func(on bool) {
		patch := `{"metadata":{"labels":{"team":null}}}`
		if on {
			patch = fmt.Sprintf(`{"metadata":{"labels":{"team":%q}}}`, team)
		}
		if _, err := kube.Client.CoreV1().Namespaces().Patch(ctx, c.ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labelNamespace(true)
	podIP := c.topo.Nodes[0].PodIP(ipfamily.V4, 5).String()
	kube.RunPod(t, c.ns, "client", "node1", nil, []netip.Addr{netip.MustParseAddr(podIP)})
	kube.RunPod(t, c.ns, "host-net", "node1", nil, []netip.Addr{netip.MustParseAddr("172.18.0.2")}, func(p *corev1.Pod) { p.Spec.HostNetwork = true })

	prober := &deadNodes{dead: map[string]bool{}, probed: map[string]bool{}}
	cfg := c.config("ovn-egress-master") // the Lease the RBAC names
	cfg.Controllers = []string{master.ControllerSelection, master.ControllerTranslation, master.ControllerEgressIP}
	cfg.Select = selection.Config{HealthInterval: 50 * time.Millisecond, Prober: prober}
	m, _ := c.start(cfg, saConfigEgressIP(t)) // as the chart's ServiceAccount (egressIP.enabled): its RBAC reads pods and namespaces, patches egressips
	if m.Translation() == nil {
		t.Fatal("the master runs no translation controller (the EgressIP rows') with one central NB")
	}
	eips, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ip = "172.18.0.251"
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "rows-" + c.ns}, Spec: egressipv1.EgressIPSpec{
		EgressIPs: []string{ip}, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}}}
	if _, err := eips.K8sV1().EgressIPs().Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })

	find := func(table string, cond ...string) []string {
		args := append([]string{"--bare", "--columns=_uuid", "find", table, "external_ids:k8s.ovn.org/name=" + e.Name}, cond...)
		return strings.Fields(c.ovn.MustNBCtl(t, args...))
	}
	join := func(i int) string { return c.topo.Nodes[i].JoinIPs[0].Addr().String() }
	steered := func(node int) func() bool {
		gr := fmt.Sprintf("GR_node%d", node+1)
		return func() bool {
			hops := c.ovn.MustNBCtl(t, "--bare", "--columns=nexthops", "find", "Logical_Router_Policy",
				"external_ids:k8s.ovn.org/name="+e.Name, "action=reroute")
			sets := c.ovn.MustNBCtl(t, "--bare", "--columns=addresses", "find", "Address_Set", "external_ids:k8s.ovn.org/name="+e.Name)
			nats := c.ovn.MustNBCtl(t, "--bare", "--columns=external_ip", "find", "NAT", "external_ids:k8s.ovn.org/name="+e.Name)
			onGR := c.ovn.MustNBCtl(t, "lr-nat-list", gr)
			return strings.TrimSpace(hops) == join(node) && strings.TrimSpace(sets) == podIP &&
				strings.TrimSpace(nats) == ip && strings.Contains(onGR, ip)
		}
	}
	c.eventually("the pod rerouted to GR_node2 and SNATed to "+ip, steered(1))
	if testenv.OVNVersion() != testenv.OVN25 {
		if got := strings.TrimSpace(c.ovn.MustNBCtl(t, "--bare", "--columns=logical_ip", "find", "NAT", "external_ids:k8s.ovn.org/name="+e.Name)); got != podIP {
			t.Errorf("without NAT.match the SNAT is the pod's own row: logical_ip %q, want %s", got, podIP)
		}
	}

	labelNamespace(false)
	c.eventually("no rows once the namespace is not selected", func() bool {
		return len(find("Address_Set")) == 0 && len(find("Logical_Router_Policy")) == 0 && len(find("NAT")) == 0
	})
	labelNamespace(true)
	c.eventually("the rows back once it is", steered(1))

	prober.kill("node2")
	c.eventually("reroute and SNAT on node3 once node2 stops answering", steered(2))
	if out := c.ovn.MustNBCtl(t, "lr-nat-list", "GR_node2"); strings.Contains(out, ip) {
		t.Errorf("GR_node2 still SNATs to %s:\n%s", ip, out)
	}

	if err := eips.K8sV1().EgressIPs().Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("every row of the deleted EgressIP swept", func() bool {
		return len(find("Address_Set")) == 0 && len(find("Logical_Router_Policy")) == 0 && len(find("NAT")) == 0
	})
	if st, all := m.Translation().EgressIPStats(), m.Translation().Stats(); st.Syncs == 0 || all.Changes == 0 {
		t.Errorf("EgressIP rows stats %+v, translation %+v: want syncs that changed NB", st, all)
	}
}

// egressAssignable labels nodes egress-assignable for the test.
func egressAssignable(t *testing.T, names ...string) {
	ctx := context.Background()
	nodes := kube.Client.CoreV1().Nodes()
	for _, n := range names {
		patch := `{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`
		if _, err := nodes.Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = nodes.Patch(ctx, n, types.MergePatchType, []byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":null}}}`), metav1.PatchOptions{})
		})
	}
}

// TestEgressIPRowsPodChurnByObject: a pod's change syncs only the
// EgressIPs that select it (by name, its namespace's pods alone), and what
// those syncs write is what a sync of everything writes. Two EgressIPs in
// one namespace: "a" takes the app=web pods, "b" every pod — a web pod
// selected by both leaves through "a", the first by name. Pods are
// relabelled, created and deleted; each time both objects' address sets
// are read back with ovn-nbctl; then a full sync changes nothing.
func TestEgressIPRowsPodChurnByObject(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	egressAssignable(t, "node2", "node3")
	cfg := c.config("eip-churn")
	cfg.Controllers = []string{master.ControllerTranslation, master.ControllerEgressIP}
	m, _ := c.start(cfg, kube.Config)
	eips, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(i int) netip.Addr { return c.topo.Nodes[0].PodIP(ipfamily.V4, 10+i) }
	kube.RunPod(t, c.ns, "web1", "node1", map[string]string{"app": "web"}, []netip.Addr{pod(1)})
	kube.RunPod(t, c.ns, "db2", "node1", map[string]string{"app": "db"}, []netip.Addr{pod(2)})
	names := map[string]string{"a": "a-" + c.ns, "b": "b-" + c.ns}
	for short, ip := range map[string]string{"a": "172.18.0.241", "b": "172.18.0.242"} {
		e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: names[short]}, Spec: egressipv1.EgressIPSpec{
			EgressIPs:         []string{ip},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": c.ns}}}}
		if short == "a" {
			e.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		}
		if _, err := eips.K8sV1().EgressIPs().Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })
	}
	set := func(short string) string {
		out := c.ovn.MustNBCtl(t, "--bare", "--columns=addresses", "find", "Address_Set", "external_ids:k8s.ovn.org/name="+names[short])
		f := strings.Fields(strings.ReplaceAll(out, ",", " "))
		slices.Sort(f)
		return strings.Join(f, " ")
	}
	sets := func(a, b []netip.Addr) func() bool {
		str := func(as []netip.Addr) string {
			var f []string
			for _, x := range as {
				f = append(f, x.String())
			}
			slices.Sort(f)
			return strings.Join(f, " ")
		}
		return func() bool { return set("a") == str(a) && set("b") == str(b) }
	}
	c.eventually("a: web1; b: db2 (web1 leaves through a, first by name)", sets([]netip.Addr{pod(1)}, []netip.Addr{pod(2)}))
	rows := m.Translation()
	partial0 := rows.EgressIPStats().Partial

	pods := kube.Client.CoreV1().Pods(c.ns)
	if _, err := pods.Patch(ctx, "web1", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"db"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("web1 relabelled db: a has no pod, b both", sets(nil, []netip.Addr{pod(1), pod(2)}))
	kube.RunPod(t, c.ns, "web3", "node1", map[string]string{"app": "web"}, []netip.Addr{pod(3)})
	c.eventually("web3 created: a has it, b does not", sets([]netip.Addr{pod(3)}, []netip.Addr{pod(1), pod(2)}))
	zero := int64(0)
	if err := pods.Delete(ctx, "db2", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	c.eventually("db2 deleted: b keeps web1", sets([]netip.Addr{pod(3)}, []netip.Addr{pod(1)}))
	if got := rows.EgressIPStats().Partial - partial0; got < 3 {
		t.Errorf("%d syncs by object name for 3 pod changes; want them synced by object, not all at once", got)
	}

	c.eventually("the translation controller idle", rows.Idle)
	before, syncs := rows.Stats(), rows.EgressIPStats().Syncs
	rows.EnqueueAll()
	c.eventually("a full sync", func() bool { return rows.EgressIPStats().Syncs > syncs && rows.Idle() })
	if after := rows.Stats(); after.Changes != before.Changes {
		t.Errorf("a full sync after the syncs by object changed %d rows: they had written something else", after.Changes-before.Changes)
	}
}

// TestEgressIPRowsStandBackFromOVNKubernetesEgressIP: while ovn-kubernetes'
// own EgressIP serves pods in NB (its reroute policy), the master assigns no
// IP and writes no EgressIP rows (both would steer the same pods at the same
// priority, and its cluster-manager assigns too) and says why; once it is
// gone it assigns and writes them.
func TestEgressIPRowsStandBackFromOVNKubernetesEgressIP(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	nodes := kube.Client.CoreV1().Nodes()
	if _, err := nodes.Patch(ctx, "node2", types.MergePatchType, []byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = nodes.Patch(ctx, "node2", types.MergePatchType, []byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":null}}}`), metav1.PatchOptions{})
	})
	team := fmt.Sprintf("standback-%d", time.Now().UnixNano())
	if _, err := kube.Client.CoreV1().Namespaces().Patch(ctx, c.ns, types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"team":%q}}}`, team)), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kube.RunPod(t, c.ns, "client", "node1", nil, []netip.Addr{c.topo.Nodes[0].PodIP(ipfamily.V4, 7)})
	// ovn-kubernetes' EgressIP reroute of a pod, as its EgressIP writes it.
	foreign := strings.TrimSpace(c.ovn.MustNBCtl(t, "--id=@p", "create", "Logical_Router_Policy", "priority=100", `match="ip4.src == 10.244.1.9"`, "action=reroute",
		`nexthops="100.64.0.3"`, `external_ids:k8s.ovn.org/owner-controller=default-network-controller`, `external_ids:k8s.ovn.org/owner-type=EgressIP`,
		`external_ids:k8s.ovn.org/name=other_ns/pod`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p"))

	cfg := c.config("eip-standback")
	cfg.Controllers = []string{master.ControllerSelection, master.ControllerTranslation, master.ControllerEgressIP}
	cfg.Select = selection.Config{HealthInterval: 50 * time.Millisecond, Prober: allReachable{}}
	cfg.Observe = observe.New(observe.Config{}, testLogger(t))
	m, _ := c.start(cfg, kube.Config)
	eips, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "standback-" + c.ns}, Spec: egressipv1.EgressIPSpec{
		EgressIPs: []string{"172.18.0.252"}, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}}}
	if _, err := eips.K8sV1().EgressIPs().Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })
	ours := func() string {
		return strings.TrimSpace(c.ovn.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy", "external_ids:k8s.ovn.org/name="+e.Name))
	}
	c.eventually("the assignment and the rows controller standing back", func() bool {
		return m.EgressIP().Stats().Blocked > 0 && m.Translation().EgressIPStats().Refused > 0
	})
	if got, err := eips.K8sV1().EgressIPs().Get(ctx, e.Name, metav1.GetOptions{}); err != nil || len(got.Status.Items) != 0 {
		t.Errorf("the master assigned beside ovn-kubernetes' own EgressIP: %+v (%v)", got.Status, err)
	}
	if err := cfg.Observe.IsReady(); err == nil || !strings.Contains(err.Error(), "EgressIP standing back") || !strings.Contains(err.Error(), "--enable-egress-ip=false") {
		t.Errorf("readiness beside ovn-kubernetes' serving EgressIP: %v; want not ready, naming the flag", err)
	}
	if got := ours(); got != "" {
		t.Fatalf("EgressIP rows written beside ovn-kubernetes' own EgressIP: %s", got)
	}
	if got := c.ovn.MustNBCtl(t, "--bare", "--columns=priority", "list", "Logical_Router_Policy", foreign); strings.TrimSpace(got) != "100" {
		t.Errorf("ovn-kubernetes' policy changed: priority %q", got)
	}
	c.ovn.MustNBCtl(t, "remove", "Logical_Router", "ovn_cluster_router", "policies", foreign)
	c.eventually("assigned and the rows written once ovn-kubernetes' EgressIP is gone", func() bool {
		got, err := eips.K8sV1().EgressIPs().Get(ctx, e.Name, metav1.GetOptions{})
		return err == nil && len(got.Status.Items) == 1 && ours() != ""
	})
}
