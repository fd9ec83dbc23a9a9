package translate

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The fuzz targets of what another writer controls: the ovn-kubernetes
// annotations of a Node, an agent's report, what a node agent plans from
// tenants' objects, and EgressIP assignment. Each must never panic, must be
// deterministic, and must keep the invariant that makes it safe. .ci/run
// runs each for a bounded time (make fuzz); the seeds run in make test.

// FuzzParseNode: any annotation values give a NodeInfo whose addresses are
// valid and canonical, the same twice; what could not be read is a Problem.
func FuzzParseNode(f *testing.F) {
	f.Add(`{"default":["10.244.1.0/24"]}`, `["172.18.0.2/16","fc00::2/64"]`, `{"ipv4":"172.18.0.2/16"}`,
		`{"default":{"mode":"shared","mac-address":"0a:58:ac:12:00:02","next-hops":["172.18.0.1"],"next-hop":"172.18.0.1"}}`, `{"ipv4":"100.64.0.2/16"}`)
	f.Add(`{"default":"fd00:10:244:1::/64"}`, `not json`, `{"ipv6":"::ffff:172.18.0.2/112"}`, `{"default":{"next-hops":["x","::ffff:1.2.3.4"]}}`, `{`)
	f.Add(``, `[""]`, `{}`, `{"default":null}`, `{"ipv4":"300.1.1.1/8"}`)
	f.Fuzz(func(t *testing.T, subnets, hostCIDRs, primary, gateway, lrp string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{
			AnnotNodeSubnets: subnets, AnnotHostCIDRs: hostCIDRs, AnnotPrimaryIfAddr: primary,
			AnnotL3GatewayCfg: gateway, AnnotGRLRPIfAddr: lrp, AnnotTransitIfAddr: lrp}}}
		join := []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")}
		a, b := ParseNode(n, join), ParseNode(n, join)
		if !reflect.DeepEqual(a, b) {
			t.Fatal("ParseNode is not deterministic")
		}
		for _, ip := range append(a.HostIPs, a.GatewayNextHops...) {
			if !ip.IsValid() || ip != ipfamily.Canonical(ip) {
				t.Fatalf("address %v is not valid and canonical", ip)
			}
		}
		e := ParseEgressIPNode(n, true)
		for _, p := range append(e.Primary, e.HostNetworks...) {
			if p != p.Masked() || p.Addr() != ipfamily.Canonical(p.Addr()) {
				t.Fatalf("network %v is not masked and canonical", p)
			}
		}
	})
}

// FuzzParseReport: a report either fails to parse or survives a round
// trip through its encoding unchanged; a report ConfigMap names the node
// and a part 0..n it is for (its entries may still be refused), or no
// node at all.
func FuzzParseReport(f *testing.F) {
	f.Add(`{"ns/web":{"ips":["172.18.0.100"],"eps":"0011223344556677"}}`, "ovn-egress-report.node1", "node1")
	f.Add(`{"ns/web":{"network":"100","eps":""}}`, "ovn-egress-report-3.node1", "node1")
	f.Add(`[]`, "ovn-egress-report-0.node1", "node1")
	f.Add(`{"a":null}`, "ovn-egress-report-03.node1", "")
	f.Fuzz(func(t *testing.T, data, name, node string) {
		r, err := ParseReport(data)
		if err == nil {
			back, err := ParseReport(r.Encode())
			if err != nil || !reflect.DeepEqual(back, r) {
				t.Fatalf("round trip of %q: %v, %v", data, back, err)
			}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{ReportNodeKey: node, ReportDataKey: data}}
		got, part, _, err := ParseReportConfigMap(cm)
		if _, perr := ParseReport(data); err != nil && got != "" && perr == nil {
			t.Fatalf("report of node %q refused although its entries parse: %v", got, err)
		}
		if got != "" && (got != node || part < 0 || !strings.HasSuffix(name, "."+node)) {
			t.Fatalf("ConfigMap %q of node %q read as node %q part %d", name, node, got, part)
		}
	})
}

// FuzzNodePlan: whatever EgressServices, Services and slices the agent is
// given, its plan is the same twice, every SNAT element maps a cluster
// endpoint to an ingress IP of its family that pods may leave with (not a
// node's, not loopback, not inside the cluster…), each endpoint once, and
// every rule is at the configured priority.
func FuzzNodePlan(f *testing.F) {
	f.Add("node1", "", "10.128.0.3", "5.5.5.5", "fe00::3", "10.128.0.9", byte(0))
	f.Add("ALL", "100", "10.128.1.4", "10.128.0.1", "192.168.18.15", "5:5::5", byte(7))
	f.Add("node1", "mynetwork", "::ffff:10.128.0.3", "127.0.0.1", "", "not-an-ip", byte(255))
	f.Fuzz(func(t *testing.T, host, network, ep1, ingress1, ep2, ingress2 string, choices byte) {
		by := egressv1.SourceIPMode("")
		if choices&1 != 0 {
			by = egressv1.Network
		}
		ess := []*egressv1.EgressService{planES("ns", "a", host, by, network), planES("ns", "b", planNode, "", "")}
		svcs := []*corev1.Service{planSvc("ns", "a", []string{"10.96.0.10"}, []string{ingress1, ingress2}),
			planSvc("ns", "b", []string{"10.96.0.11"}, []string{ingress2})}
		if choices&2 != 0 {
			svcs[0].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		slices := []*discoveryv1.EndpointSlice{
			planSlice("ns", "a", discoveryv1.AddressTypeIPv4, ep1+"@node1", ep2+"@node2"),
			planSlice("ns", "a", discoveryv1.AddressTypeIPv6, ep2+"@node1"),
			planSlice("ns", "b", discoveryv1.AddressTypeIPv4, ep1+"@node1"),
		}
		in := planInput(ess, svcs, slices, map[string]uint32{"mynetwork": 100})
		in.NodeSubnets = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/24")}
		if choices&4 != 0 {
			in.NodeIPs = []netip.Addr{netip.MustParseAddr("5.5.5.5")}
		}
		a, b := NodePlan(in), NodePlan(in)
		if renderNodePlan(a) != renderNodePlan(b) {
			t.Fatal("NodePlan is not deterministic")
		}
		seen := map[netip.Addr]bool{}
		nets := IngressNetworks{ClusterSubnets: in.ClusterSubnets}
		for _, e := range a.Desired.SNAT {
			if seen[e.Endpoint] {
				t.Fatalf("endpoint %s SNATed twice:\n%s", e.Endpoint, renderNodePlan(a))
			}
			seen[e.Endpoint] = true
			if ipfamily.Of(e.Endpoint) != e.Family || ipfamily.Of(e.SNATIP) != e.Family {
				t.Fatalf("element %s mixes families", e)
			}
			if !inAny(e.Endpoint, in.ClusterSubnets) {
				t.Fatalf("element %s: endpoint outside the cluster subnets", e)
			}
			if why := nets.Refusal(e.SNATIP, nodeIPSet(in.NodeIPs)); why != "" {
				t.Fatalf("element %s: SNAT IP %s", e, why)
			}
		}
		for _, r := range a.Desired.Rules {
			if r.Priority != in.Config.RulePriority {
				t.Fatalf("rule %s at priority %d", r, r.Priority)
			}
		}
	})
}

func nodeIPSet(ips []netip.Addr) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, ip := range ips {
		out[ip] = "a node"
	}
	return out
}

// FuzzAssignEgressIPs: whatever the spec, the forged status items and the
// nodes' annotations, assignment is the same twice, places every IP on at
// most one node, each object's IPs on distinct nodes, and never an IP that
// a node's Refusal or an IP no host may hold names.
func FuzzAssignEgressIPs(f *testing.F) {
	f.Add("172.18.0.100", "172.18.0.1", "node2", `["172.18.0.2/16"]`, `{"default":{"next-hops":["172.18.0.1"]}}`, byte(0))
	f.Add("fc00:f853:ccd:e793::5", "fc00:f853:ccd:e793::", "node1", `["fc00:f853:ccd:e793::2/64"]`, `{`, byte(3))
	f.Add("172.18.255.255", "not-an-ip", "", `[]`, ``, byte(255))
	f.Fuzz(func(t *testing.T, ip1, ip2, statusNode, hostCIDRs, gateway string, choices byte) {
		nodes := map[string]*EgressIPNode{}
		for i, name := range []string{"node1", "node2", "node3"} {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelEgressAssignable: ""},
				Annotations: map[string]string{AnnotHostCIDRs: hostCIDRs, AnnotL3GatewayCfg: gateway,
					AnnotPrimaryIfAddr: `{"ipv4":"172.18.0.` + string(rune('2'+i)) + `/16","ipv6":"fc00:f853:ccd:e793::` + string(rune('2'+i)) + `/64"}`}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			nodes[name] = ParseEgressIPNode(n, choices&(1<<i) == 0)
		}
		objs := []*egressipv1.EgressIP{
			{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: egressipv1.EgressIPSpec{EgressIPs: []string{ip1, ip2}},
				Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: statusNode, EgressIP: ip2}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: egressipv1.EgressIPSpec{EgressIPs: []string{ip2}},
				Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: "node3", EgressIP: ip1}}}},
		}
		in := EgressIPInput{EgressIPs: objs, Nodes: nodes}
		a, b := AssignEgressIPs(in), AssignEgressIPs(in)
		if !reflect.DeepEqual(a, b) {
			t.Fatal("AssignEgressIPs is not deterministic")
		}
		holder := map[netip.Addr]string{}
		for obj, items := range a.Items {
			onNode := map[string]bool{}
			for _, it := range items {
				ip := netip.MustParseAddr(it.EgressIP)
				if prev, ok := holder[ip]; ok {
					t.Fatalf("%s assigned twice (%s, %s/%s)", ip, prev, obj, it.Node)
				}
				holder[ip] = obj + "/" + it.Node
				if onNode[it.Node] {
					t.Fatalf("%s has two IPs on %s", obj, it.Node)
				}
				onNode[it.Node] = true
				if why := (IngressNetworks{}).Refusal(ip, nil); why != "" {
					t.Fatalf("%s assigned although it %s", ip, why)
				}
				for _, n := range nodes {
					if why := n.Refusal(ip); why != "" {
						t.Fatalf("%s assigned although it %s", ip, why)
					}
				}
			}
		}
	})
}
