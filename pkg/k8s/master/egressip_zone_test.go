package master_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/zone"
)

// TestEgressIPInterconnectZones: three zones, each with its own real
// NB+SB+northd and the ovn-kubernetes interconnect topology of its node, one
// zone translation per zone with EgressIP rows, as each node agent runs it.
// An EgressIP selects a pod on node1 and is held by node3: node1's zone
// reroutes the pod's packet to node3's transit address; node3's zone routes
// it, arriving over the transit switch, to GR_node3 and SNATs it to the IP
// (ovn-trace shows both); node2's zone writes nothing. The IP moving to
// node2 moves the next hop, the SNAT and the cluster route with it.
func TestEgressIPInterconnectZones(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	zones := testenv.NewZones(t, topo)
	kube.CreateNodes(t, topo)
	ns := kube.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eips, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("ic-%d", time.Now().UnixNano()) // a label no other test's pod has
	podIP := topo.Nodes[0].PodIP(ipfamily.V4, 5)
	kube.RunPod(t, ns, "client", "node1", map[string]string{"app": app}, []netip.Addr{podIP})
	kube.RunPod(t, ns, "other", "node2", nil, []netip.Addr{topo.Nodes[1].PodIP(ipfamily.V4, 6)})

	const ip = "172.18.0.250"
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "ic-" + ns}, Spec: egressipv1.EgressIPSpec{EgressIPs: []string{ip},
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	if e, err = eips.K8sV1().EgressIPs().Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })
	holdOn := func(node string) {
		t.Helper()
		cur, err := eips.K8sV1().EgressIPs().Get(ctx, e.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.Items = []egressipv1.EgressIPStatusItem{{Node: node, EgressIP: ip}} // as the master assigns it
		if _, err := eips.K8sV1().EgressIPs().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	holdOn("node3")

	done := runZones(ctx, t, topo, zones, zone.Clients{Kube: kube.Client, Egress: kube.Egress, EgressIP: eips})
	defer func() {
		cancel()
		for range zones {
			if err := <-done; err != nil {
				t.Errorf("zone: %v", err)
			}
		}
	}()

	// What each zone holds of the EgressIP, read back with ovn-nbctl.
	type held struct{ hops, nat, route string }
	read := func(z string) held {
		o := zones[z]
		var h held
		h.hops = strings.TrimSpace(o.MustNBCtl(t, "--bare", "--columns=nexthops", "find", "Logical_Router_Policy",
			"external_ids:k8s.ovn.org/name="+e.Name, "action=reroute"))
		for _, n := range strings.Fields(o.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "NAT", "external_ids:k8s.ovn.org/name="+e.Name)) {
			h.nat = strings.TrimSpace(o.MustNBCtl(t, "get", "NAT", n, "external_ip"))
		}
		if routes, _ := o.NBCtl("lr-route-list", "ovn_cluster_router"); strings.Contains(routes, "10.244.0.0/16") {
			h.route = "cluster route"
		}
		return h
	}
	transit := func(i int) string { return topo.Nodes[i].TransitIPs[0].Addr().String() }
	converge := func(what string, want map[string]held) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := map[string]held{}
			for z := range want {
				got[z] = read(z)
			}
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: zones hold %+v, want %+v", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	converge("held by node3", map[string]held{
		"node1": {hops: transit(2)},
		"node2": {},
		"node3": {nat: `"` + ip + `"`, route: "cluster route"},
	})
	if testenv.OVNVersion() != testenv.OVN25 {
		if got := strings.TrimSpace(zones["node3"].MustNBCtl(t, "--bare", "--columns=logical_ip", "find", "NAT", "external_ids:k8s.ovn.org/name="+e.Name)); got != podIP.String() {
			t.Errorf("without NAT.match node3's zone SNATs the remote pod by its own row: logical_ip %q, want %s", got, podIP)
		}
	}

	// The pod's zone sends its packet to node3's transit address.
	z1 := zones["node1"]
	z1.AddPod(t, "node1", "pod1", podIP)
	z1.MustNBCtl(t, "--wait=sb", "sync")
	out, err := z1.Trace("node1", fmt.Sprintf(`inport == "node1_pod1" && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == 8.8.8.8 && ip.ttl == 64 && tcp`,
		testenv.MAC(podIP), testenv.MAC(topo.Nodes[0].Subnets[0].Addr().Next()), podIP))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "reg0 = "+transit(2)) || !strings.Contains(out, "rtots-node1") {
		t.Errorf("zone node1 does not send the selected pod's packet to node3's transit address:\n%s", out)
	}
	// The egress node's zone routes it to its GR and SNATs it to the IP.
	z3 := zones["node3"]
	z3.MustNBCtl(t, "--wait=sb", "sync")
	// The external gateway's MAC is known (else the trace follows the ARP request).
	dp := z3.MustSBCtl(t, "--bare", "--columns=_uuid", "find", "Datapath_Binding", "external_ids:name=GR_node3")
	z3.MustSBCtl(t, "create", "MAC_Binding", "logical_port=rtoe-GR_node3", "ip="+topo.ExternalGateways[0].String(), `mac="0a:58:ac:12:00:fe"`, "datapath="+dp)
	out, err = z3.Trace("transit_switch", fmt.Sprintf(`inport == "tstor-node1" && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == 8.8.8.8 && ip.ttl == 64 && tcp`,
		testenv.MAC(topo.Nodes[0].TransitIPs[0].Addr()), testenv.MAC(topo.Nodes[2].TransitIPs[0].Addr()), podIP))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ct_snat("+ip) {
		t.Errorf("zone node3 does not SNAT the remote pod's packet to %s:\n%s", ip, out)
	}

	holdOn("node2")
	converge("moved to node2", map[string]held{
		"node1": {hops: transit(1)},
		"node2": {nat: `"` + ip + `"`, route: "cluster route"},
		"node3": {},
	})
}
