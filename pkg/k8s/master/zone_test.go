package master_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/zone"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestInterconnectZones: three zones, each with its own real NB+SB+northd
// and the ovn-kubernetes interconnect topology of its node; one zone
// translation per zone (as each node agent runs it). The endpoint's zone
// reroutes to the host's transit address, and the host's zone reroutes a
// packet entering from the transit switch to the host's management port;
// ovn-trace shows both. The master detects interconnect and only selects.
func TestInterconnectZones(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	zones := testenv.NewZones(t, topo)
	kube.CreateNodes(t, topo)
	ns := kube.Namespace(t)
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1", "10.244.3.5@node3")
	kube.SetHost(t, ns, "web", "node2")
	kube.SetReport(t, "node2", translate.Report{ns + "/web": kube.ReportFor(t, "node2", ns, "web", topo.ClusterSubnets)})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runZones(ctx, t, topo, zones, zone.Clients{Kube: kube.Client, Egress: kube.Egress})
	set := translate.AddressSetName("ovn-egress:EgressServiceHost:node2:v4")
	want := map[string]struct{ addrs, nexthop string }{
		"node1": {`["10.244.1.5"]`, "100.88.0.3"},
		"node2": {`["10.244.1.5", "10.244.3.5"]`, "10.244.2.2"},
		"node3": {`["10.244.3.5"]`, "100.88.0.3"},
	}
	for zone, w := range want {
		o := zones[zone]
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, _ := o.NBCtl("--if-exists", "get", "Address_Set", set, "addresses")
			policies, _ := o.NBCtl("lr-policy-list", "ovn_cluster_router")
			if got == w.addrs && strings.Contains(policies, w.nexthop) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("zone %s: set %s, policies:\n%s\nwant %s rerouted to %s", zone, got, policies, w.addrs, w.nexthop)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The host's zone routes the cluster's pod traffic to its GR (src-ip),
	// so that packets from other zones reach the reroute policies.
	if routes := zones["node2"].MustNBCtl(t, "lr-route-list", "ovn_cluster_router"); !strings.Contains(routes, "10.244.0.0/16") || !strings.Contains(routes, "100.64.0.3 src-ip") {
		t.Errorf("zone node2 lacks the cluster src-ip route:\n%s", routes)
	}
	if routes := zones["node1"].MustNBCtl(t, "lr-route-list", "ovn_cluster_router"); strings.Contains(routes, "10.244.0.0/16") {
		t.Errorf("zone node1 (no host there) has a cluster src-ip route:\n%s", routes)
	}

	// The endpoint's zone sends the pod's packet to the host's transit address.
	z1 := zones["node1"]
	z1.AddPod(t, "node1", "pod1", topo.Nodes[0].PodIP(ipfamily.V4, 5))
	z1.MustNBCtl(t, "--wait=sb", "sync")
	out, err := z1.Trace("node1", fmt.Sprintf(`inport == "node1_pod1" && eth.src == %s && eth.dst == %s && ip4.src == 10.244.1.5 && ip4.dst == 8.8.8.8 && ip.ttl == 64 && tcp`,
		testenv.MAC(topo.Nodes[0].PodIP(ipfamily.V4, 5)), testenv.MAC(topo.Nodes[0].Subnets[0].Addr().Next())))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "reg0 = 100.88.0.3") || !strings.Contains(out, "rtots-node1") {
		t.Errorf("zone node1 does not send the packet to node2's transit address:\n%s", out)
	}
	// The host's zone reroutes it, arriving over the transit switch, to the management port.
	z2 := zones["node2"]
	out, err = z2.Trace("transit_switch", fmt.Sprintf(`inport == "tstor-node1" && eth.src == %s && eth.dst == %s && ip4.src == 10.244.1.5 && ip4.dst == 8.8.8.8 && ip.ttl == 64 && tcp`,
		testenv.MAC(topo.Nodes[0].TransitIPs[0].Addr()), testenv.MAC(topo.Nodes[1].TransitIPs[0].Addr())))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "reg0 = 10.244.2.2") || !strings.Contains(out, `output to "k8s-node2"`) {
		t.Errorf("zone node2 does not reroute the transit packet to its management port:\n%s", out)
	}

	// The master sees interconnect and selects only (no NB needed).
	mcfg := master.Config{Mode: master.ModeAuto}
	mcfg.Translation.Translate = translate.DefaultConfig()
	m, err := master.New(ctx, mcfg, kube.Config, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() != master.ModeIC || m.Translation() != nil {
		t.Errorf("mode %s, want %s without a translation controller", m.Mode(), master.ModeIC)
	}
	cancel()
	for range zones {
		if err := <-done; err != nil {
			t.Errorf("zone: %v", err)
		}
	}
}

// runZones runs one zone translation per zone, as each node agent runs it
// (with EgressIP rows when clients has the EgressIP client), until ctx
// ends; each one's error arrives on the channel returned.
func runZones(ctx context.Context, t *testing.T, topo testenv.Topology, zones map[string]*testenv.OVN, clients zone.Clients) chan error {
	done := make(chan error, len(zones))
	if clients.Informers == nil {
		// The zones share one set of informers, running before they start,
		// as a node agent shares its own with its zone's translation
		// (informer.Shared): each zone adds its handlers and indexers to
		// running informers.
		shared := informer.NewShared(clients.Kube, clients.Egress)
		shared.Kube.Core().V1().Services().Informer()
		shared.Kube.Discovery().V1().EndpointSlices().Informer()
		shared.Egress.K8s().V1().EgressServices().Informer()
		shared.Kube.Start(ctx.Done())
		shared.Egress.Start(ctx.Done())
		clients.Informers = shared
	}
	for name, o := range zones {
		tc := translate.DefaultConfig()
		tc.ClusterSubnets, tc.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
		cfg := zone.Config{NB: ovn.ClientConfig{Addresses: []string{o.NBAddress()}}, Node: name, ReportNamespace: testenv.ReportNamespace,
			Translation: translation.Config{Translate: tc, Zone: name}, EgressIP: clients.EgressIP != nil}
		go func() { done <- zone.Run(ctx, cfg, clients, testLogger(t).WithField("zone", name)) }()
	}
	return done
}

// TestClusterRouteHandedOverToEgressIP: in the host's zone ovn-egress adds
// the cluster src-ip route to the GR. While ovn-kubernetes' EgressIP is
// active there (its allow policies, as it writes them) it may rely on that
// route: ovn-egress writes no second one beside ovn-kubernetes' own; when
// that one disappears (its feature turned off, or by hand) ovn-egress adds
// its own again at once — not at the next resync, five minutes later, while
// traffic from other zones is dropped (seen with the real binaries) — and
// when the EgressService goes it hands its route over (its external ids
// removed, the row kept) instead of deleting a route EgressIP relies on.
func TestClusterRouteHandedOverToEgressIP(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	z2 := testenv.NewOVN(t)
	z2.BuildZone(t, topo, "node2")
	kube.CreateNodes(t, topo)
	ns := kube.Namespace(t)
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, ns, "web", "node2")
	kube.SetReport(t, "node2", translate.Report{ns + "/web": kube.ReportFor(t, "node2", ns, "web", topo.ClusterSubnets)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := translate.DefaultConfig()
	tc.ClusterSubnets, tc.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
	done := make(chan error, 1)
	go func() {
		done <- zone.Run(ctx, zone.Config{NB: ovn.ClientConfig{Addresses: []string{z2.NBAddress()}}, Node: "node2", ReportNamespace: testenv.ReportNamespace,
			Translation: translation.Config{Translate: tc, Zone: "node2"}}, zone.Clients{Kube: kube.Client, Egress: kube.Egress}, testLogger(t))
	}()
	route := func() (uuid, owner string) {
		u := strings.TrimSpace(z2.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Static_Route", "ip_prefix=10.244.0.0/16", "policy=src-ip"))
		if u == "" || strings.Contains(u, "\n") {
			return u, ""
		}
		return u, z2.MustNBCtl(t, "get", "Logical_Router_Static_Route", u, "external_ids")
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				u, o := route()
				t.Fatalf("timed out waiting for %s; cluster route %q %s", what, u, o)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var owned string
	wait("ovn-egress's cluster route", func() bool {
		u, o := route()
		owned = u
		return u != "" && strings.Contains(o, "EgressServiceClusterRoute")
	})

	// ovn-kubernetes' EgressIP turns on in this zone.
	z2.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=102", `match="ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16"`,
		"action=allow", `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
		`external_ids:"k8s.ovn.org/name"="EIP-No-Reroute-Pod-To-Pod"`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	// ovn-kubernetes writes its own route in place of ovn-egress's (as its
	// EgressIP does where it finds none): ovn-egress writes no second one.
	z2.MustNBCtl(t, "--", "remove", "Logical_Router", "ovn_cluster_router", "static_routes", owned,
		"--", "--id=@r", "create", "Logical_Router_Static_Route", "ip_prefix=10.244.0.0/16", "nexthop=100.64.0.3", "policy=src-ip",
		"--", "add", "Logical_Router", "ovn_cluster_router", "static_routes", "@r")
	wait("ovn-kubernetes' route alone", func() bool { u, o := route(); return u != "" && u != owned && o == "{}" })
	theirs, _ := route()
	time.Sleep(500 * time.Millisecond) // the zone has seen the change (its handler syncs every node on it)
	if u, o := route(); u != theirs || o != "{}" {
		t.Errorf("beside ovn-kubernetes' route: %q %s; want it alone", u, o)
	}
	// Its route disappears: ovn-egress's own comes back at once.
	z2.MustNBCtl(t, "remove", "Logical_Router", "ovn_cluster_router", "static_routes", theirs)
	wait("ovn-egress's cluster route again", func() bool {
		u, o := route()
		owned = u
		return u != "" && strings.Contains(o, "EgressServiceClusterRoute")
	})

	// The EgressService goes: the handed-over route stays, for EgressIP.
	if err := kube.Egress.K8sV1().EgressServices(ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	set := translate.AddressSetName("ovn-egress:EgressServiceHost:node2:v4")
	wait("the host's rows gone", func() bool {
		out, err := z2.NBCtl("--if-exists", "get", "Address_Set", set, "addresses")
		return err == nil && out == ""
	})
	if u, o := route(); u != owned || o != "{}" {
		t.Errorf("the cluster route EgressIP relies on: %q %s; want %s kept, without ovn-egress's ids", u, o, owned)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("zone: %v", err)
	}
}
