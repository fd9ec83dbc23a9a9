package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/zone"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestVerifyZonesEgressIP: verify checks a zone's EgressIP rows too. Three
// interconnect zones converge with the zone translations the agents run
// (--egressip): an EgressIP held by node3 selecting a pod on node1. Each
// zone verifies clean — node1's reroute to node3's transit address,
// node3's SNAT and the cluster route its EgressIP needs (not drift of the
// EgressService rows) — and node1's set emptied behind the translators'
// back is reported as different.
func TestVerifyZonesEgressIP(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	zones := testenv.NewZones(t, topo)
	kube.CreateNodes(t, topo)
	ns := kube.Namespace(t)
	eips, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("verify-ic-%d", time.Now().UnixNano())
	kube.RunPod(t, ns, "client", "node1", map[string]string{"app": app}, []netip.Addr{topo.Nodes[0].PodIP(ipfamily.V4, 5)})
	ctx := context.Background()
	e, err := eips.K8sV1().EgressIPs().Create(ctx, &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "verify-" + ns},
		Spec: egressipv1.EgressIPSpec{EgressIPs: []string{"172.18.0.240"}, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })
	e.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "node3", EgressIP: "172.18.0.240"}} // as the master assigns it
	if _, err := eips.K8sV1().EgressIPs().Update(ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	zctx, stop := context.WithCancel(ctx)
	done := make(chan error, len(zones))
	quiet := logrus.New()
	quiet.SetLevel(logrus.WarnLevel)
	for name, o := range zones {
		tc := translate.DefaultConfig()
		tc.ClusterSubnets, tc.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
		cfg := zone.Config{NB: ovn.ClientConfig{Addresses: []string{o.NBAddress()}}, Node: name, ReportNamespace: testenv.ReportNamespace,
			Translation: translation.Config{Translate: tc, Zone: name}, EgressIP: true}
		go func() {
			done <- zone.Run(zctx, cfg, zone.Clients{Kube: kube.Client, Egress: kube.Egress, EgressIP: eips}, logrus.NewEntry(quiet))
		}()
	}
	stopped := false
	stopZones := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		for range zones {
			if err := <-done; err != nil {
				t.Errorf("zone: %v", err)
			}
		}
	}
	defer stopZones()
	find := func(z, table string, cond ...string) string {
		args := append([]string{"--bare", "--columns=_uuid", "find", table, "external_ids:k8s.ovn.org/name=" + e.Name}, cond...)
		return strings.TrimSpace(zones[z].MustNBCtl(t, args...))
	}
	for deadline := time.Now().Add(20 * time.Second); find("node1", "Logical_Router_Policy", "action=reroute") == "" || find("node3", "NAT") == ""; {
		if time.Now().After(deadline) {
			t.Fatal("the zones did not write the EgressIP's rows")
		}
		time.Sleep(50 * time.Millisecond)
	}
	verify := func(z string) (string, int) {
		out, stderr, code := run(t, "verify", "--kubeconfig", kube.Kubeconfig, "--nb-address", zones[z].NBAddress(), "--zone", z)
		if code == exitError {
			t.Fatalf("verify %s: exit 2: %s", z, stderr)
		}
		return out, code
	}
	// Every zone converged — what verify says of each, while the zones
	// still run (node2's zone writes its node-IP sets in its own time).
	for z := range zones {
		var out string
		var code int
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if out, code = verify(z); code == 0 && strings.Contains(out, "no drift") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("zone %s, rows as the zone translation wrote them: exit %d\n%s", z, code, out)
			}
		}
	}
	stopZones() // converged; nothing repairs what follows
	// ovn-kubernetes' own EgressIP serving a pod in zone node1 (its
	// reroute): a conflict, exit 1 (before: "0 conflicts").
	zones["node1"].MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=100", `match="ip4.src == 10.244.1.9"`,
		"action=reroute", `nexthops="100.88.0.4"`, `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`,
		`external_ids:"k8s.ovn.org/owner-type"="EgressIP"`, `external_ids:"k8s.ovn.org/name"="other_ns/pod"`,
		"--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	if out, code := verify("node1"); code != 1 || !strings.Contains(out, "conflict") || !strings.Contains(out, "--enable-egress-ip=false") {
		t.Errorf("zone node1 with ovn-kubernetes' EgressIP serving a pod: exit %d\n%s", code, out)
	}
	u := strings.TrimSpace(zones["node1"].MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy", "external_ids:k8s.ovn.org/name=other_ns/pod"))
	zones["node1"].MustNBCtl(t, "remove", "Logical_Router", "ovn_cluster_router", "policies", u)
	zones["node1"].MustNBCtl(t, "clear", "Address_Set", find("node1", "Address_Set"), "addresses")
	if out, code := verify("node1"); code == 0 || !strings.Contains(out, "different") || !strings.Contains(out, "EgressIP:"+e.Name) {
		t.Errorf("zone node1 with the EgressIP's set emptied: exit %d\n%s", code, out)
	}
}
