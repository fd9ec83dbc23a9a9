package ovn_test

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// applyEgressIPs writes the rows of the given EgressIPs (name → "ip@node"
// items and pods) and sweeps those of the names given without items.
func (e *env) applyEgressIPs(objs ...egressip.EgressIPObject) ovn.Stats {
	e.t.Helper()
	keys := make([]translate.Key, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, translate.EgressIPKey(o.EgressIP.Name))
	}
	d := egressip.TranslateEgressIPs(egressip.EgressIPRowsInput{Config: e.in.Config, Nodes: e.in.Nodes, Objects: objs})
	if len(d.Problems) > 0 {
		e.t.Fatalf("problems: %v", d.Problems)
	}
	st, err := e.a.Apply(context.Background(), keys, d)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func egressIPObject(name string, items []string, pods ...netip.Addr) egressip.EgressIPObject {
	o := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, it := range items {
		ip, node, _ := strings.Cut(it, "@")
		o.Spec.EgressIPs = append(o.Spec.EgressIPs, ip)
		o.Status.Items = append(o.Status.Items, egressipv1.EgressIPStatusItem{EgressIP: ip, Node: node})
	}
	sel := egressip.EgressIPPods{}
	for _, p := range pods {
		sel[ipfamily.Of(p)] = append(sel[ipfamily.Of(p)], p)
	}
	return egressip.EgressIPObject{EgressIP: o, Pods: sel}
}

// TestEgressIPRowsSteerThePods: an EgressIP's rows on a real NB, read back
// with ovn-nbctl and traced with ovn-trace: the selected pod's packet to the
// outside is rerouted to its egress node's gateway router and leaves with
// the egress IP; to a node address or another pod it keeps its own; an
// unselected pod is untouched. Two IPs on two nodes are one policy with two
// next hops (ECMP); the SNAT is one row per pod without NAT.match (23.03) and
// one row matching the set with it (25.03). Deleting the object sweeps its
// rows, and the EgressService rows beside them are not touched.
func TestEgressIPRowsSteerThePods(t *testing.T) {
	e := newEnv(t, ipfamily.V4)
	selected, other := e.topo.Nodes[0].PodIP(ipfamily.V4, 5), e.topo.Nodes[0].PodIP(ipfamily.V4, 6)
	e.ovn.AddPod(t, "node1", "pod1", selected)
	e.ovn.AddPod(t, "node1", "pod2", other)
	e.service("ns1", "svc1", "node3", []string{"172.18.0.100"}, e.topo.Nodes[2].PodIP(ipfamily.V4, 9).String()+"@node3")
	e.apply() // the EgressService rows, and the node-IP set the allow policy uses
	esPolicies := e.policyUUIDs()

	st := e.applyEgressIPs(egressIPObject("blue", []string{"172.18.0.200@node2"}, selected))
	if st.Transactions != 1 {
		t.Errorf("%d transactions for one EgressIP, want 1", st.Transactions)
	}
	join2 := e.topo.Nodes[1].JoinIPs[0].Addr().String()
	if !e.ovn.ReroutesTo(t, join2) {
		t.Errorf("no reroute to GR_node2's join address %s:\n%s", join2, e.nbctl("lr-policy-list", translate.ClusterRouter))
	}
	if !e.snats("GR_node2", "172.18.0.200", selected.String()) {
		t.Errorf("GR_node2 does not SNAT %s to the egress IP:\n%s", selected, e.nbctl("lr-nat-list", "GR_node2"))
	}
	if e.snats("GR_node2", "172.18.0.200", other.String()) {
		t.Errorf("an unselected pod is SNATed to the egress IP")
	}
	e.nbctl("--wait=sb", "sync")
	dp := e.ovn.MustSBCtl(t, "--bare", "--columns=_uuid", "find", "Datapath_Binding", "external_ids:name=GR_node2")
	e.ovn.MustSBCtl(t, "create", "MAC_Binding", "logical_port=rtoe-GR_node2", "ip="+e.topo.ExternalGateways[0].String(), `mac="0a:58:ac:12:00:fe"`, "datapath="+dp)
	trace := func(src netip.Addr, port, dst string) string {
		out, err := e.ovn.Trace("node1", fmt.Sprintf(`inport == %q && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == %s && ip.ttl == 64 && tcp`,
			port, testenv.MAC(src), testenv.MAC(e.topo.Nodes[0].Subnets[0].Addr().Next()), src, dst))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const snat = "ct_snat(172.18.0.200"
	if out := trace(selected, "node1_pod1", "8.8.8.8"); !strings.Contains(out, "reg0 = "+join2) || !strings.Contains(out, snat) {
		t.Errorf("selected pod → outside: want a reroute to %s and %s)\n%s", join2, snat, out)
	}
	for _, dst := range []string{"172.18.0.4", "10.244.3.7", "10.96.0.10"} { // node3's address, a pod, a ClusterIP
		if out := trace(selected, "node1_pod1", dst); strings.Contains(out, "reg0 = "+join2) {
			t.Errorf("selected pod → %s is rerouted to the egress node\n%s", dst, out)
		}
	}
	if out := trace(other, "node1_pod2", "8.8.8.8"); strings.Contains(out, snat) {
		t.Errorf("unselected pod → outside leaves with the egress IP\n%s", out)
	}

	// A second IP on node3: one reroute with both GRs as next hops.
	e.applyEgressIPs(egressIPObject("blue", []string{"172.18.0.200@node2", "172.18.0.201@node3"}, selected))
	hops := e.nbctl("--bare", "--columns=nexthops", "find", "Logical_Router_Policy", "external_ids:k8s.ovn.org/owner-type=EgressIP", "action=reroute")
	if got := strings.Fields(hops); len(got) != 2 {
		t.Errorf("reroute next hops %v, want GR_node2's and GR_node3's", got)
	}
	if !e.snats("GR_node3", "172.18.0.201", selected.String()) {
		t.Errorf("GR_node3 does not SNAT to its egress IP:\n%s", e.nbctl("lr-nat-list", "GR_node3"))
	}
	nats := strings.Fields(e.nbctl("--bare", "--columns=_uuid", "find", "NAT", "external_ids:k8s.ovn.org/owner-type=EgressIPNAT"))
	if len(nats) != 2 {
		t.Errorf("%d EgressIP NAT rows for one pod on two nodes, want 2", len(nats))
	}
	if testenv.OVNVersion() == testenv.OVN25 {
		if m := e.nbctl("--bare", "--columns=match", "find", "NAT", "external_ids:k8s.ovn.org/owner-type=EgressIPNAT"); !strings.Contains(m, "ip4.src == $") {
			t.Errorf("with NAT.match the EgressIP SNAT rows match the set, got %q", m)
		}
	}

	// The object is deleted: its rows go, the EgressService's stay.
	e.applyEgressIPs(egressIPObject("blue", nil))
	for _, table := range []string{"Address_Set", "Logical_Router_Policy", "NAT"} {
		if left := e.nbctl("--bare", "--columns=_uuid", "find", table, "external_ids:k8s.ovn.org/name=blue"); strings.TrimSpace(left) != "" {
			t.Errorf("%s rows of the deleted EgressIP left: %s", table, left)
		}
	}
	if got := e.policyUUIDs(); strings.Join(got, ",") != strings.Join(esPolicies, ",") {
		t.Errorf("the EgressService policies changed: %v → %v", esPolicies, got)
	}
}

// TestServedAddressesAreTheServicesNATs: on an NB without NAT.match the
// pod addresses EgressService NAT rows SNAT are served (an EgressIP leaves
// them alone); EgressIP's own NAT rows and another controller's are not.
// With NAT.match nothing is (the services' rows match their sets).
func TestServedAddressesAreTheServicesNATs(t *testing.T) {
	e := newEnv(t, ipfamily.V4)
	e.in.Config.Backend = translate.BackendOVN
	e.service("ns1", "svc1", "node2", []string{"172.18.0.100"}, "10.244.1.5@node1", "10.244.3.5@node3")
	e.apply()
	e.applyEgressIPs(egressIPObject("eip1", []string{"172.18.0.210@node1"}, netip.MustParseAddr("10.244.1.9")))
	e.nbctl("lr-nat-add", "GR_node1", "snat", "172.18.0.200", "10.244.1.77")
	served, err := ovn.ServedAddresses(context.Background(), e.c)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for a := range served {
		got = append(got, a.String())
	}
	slices.Sort(got)
	want := []string{"10.244.1.5", "10.244.3.5"}
	if ovn.FeaturesOf(e.c).NATMatch {
		want = nil
	}
	if !slices.Equal(got, want) {
		t.Errorf("served %v; want %v (NAT rows:\n%s)", got, want, e.nbctl("--columns=logical_ip,external_ids", "list", "NAT"))
	}
}

// TestOVNKubeEgressIPServingCountsItsNATs: ovn-kubernetes' EgressIP SNAT
// counts as serving on every NB schema. On OVN 25.03 the cache holds NAT
// rows of pkg/nbdbext's model, which a type switch on libovsdb's nbdb.NAT
// alone never saw: this counted 0 there.
func TestOVNKubeEgressIPServingCountsItsNATs(t *testing.T) {
	e := newEnv(t, ipfamily.V4)
	e.nbctl("--", "--id=@n", "create", "NAT", "type=snat", "external_ip=172.18.0.200", "logical_ip=10.244.1.77",
		`external_ids:k8s.ovn.org/owner-controller=default-network-controller`, `external_ids:k8s.ovn.org/owner-type=EgressIP`,
		"--", "add", "Logical_Router", "GR_node1", "nat", "@n")
	ctx := context.Background()
	var n int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if n, err = ovn.OVNKubeEgressIPServing(ctx, e.c); err != nil {
			t.Fatal(err)
		}
		if n == 1 || time.Now().After(deadline) {
			break
		}
	}
	if n != 1 {
		t.Errorf("ovn-kubernetes' EgressIP rows serving: %d, want 1 (its SNAT; NAT match in the model: %v)", n, ovn.FeaturesOf(e.c).NATMatch)
	}
}
