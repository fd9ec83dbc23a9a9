package egressip

import (
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
)

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
				Annotations: map[string]string{translate.AnnotHostCIDRs: hostCIDRs, translate.AnnotL3GatewayCfg: gateway,
					translate.AnnotPrimaryIfAddr: `{"ipv4":"172.18.0.` + string(rune('2'+i)) + `/16","ipv6":"fc00:f853:ccd:e793::` + string(rune('2'+i)) + `/64"}`}},
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
				if why := (translate.IngressNetworks{}).Refusal(ip, nil); why != "" {
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

// FuzzParseNode: any annotation values give a translate.NodeInfo whose addresses are
// valid and canonical, the same twice; what could not be read is a Problem.
func FuzzParseNode(f *testing.F) {
	f.Add(`{"default":["10.244.1.0/24"]}`, `["172.18.0.2/16","fc00::2/64"]`, `{"ipv4":"172.18.0.2/16"}`,
		`{"default":{"mode":"shared","mac-address":"0a:58:ac:12:00:02","next-hops":["172.18.0.1"],"next-hop":"172.18.0.1"}}`, `{"ipv4":"100.64.0.2/16"}`)
	f.Add(`{"default":"fd00:10:244:1::/64"}`, `not json`, `{"ipv6":"::ffff:172.18.0.2/112"}`, `{"default":{"next-hops":["x","::ffff:1.2.3.4"]}}`, `{`)
	f.Add(``, `[""]`, `{}`, `{"default":null}`, `{"ipv4":"300.1.1.1/8"}`)
	f.Fuzz(func(t *testing.T, subnets, hostCIDRs, primary, gateway, lrp string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{
			translate.AnnotNodeSubnets: subnets, translate.AnnotHostCIDRs: hostCIDRs, translate.AnnotPrimaryIfAddr: primary,
			translate.AnnotL3GatewayCfg: gateway, translate.AnnotGRLRPIfAddr: lrp, translate.AnnotTransitIfAddr: lrp}}}
		join := []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")}
		a, b := translate.ParseNode(n, join), translate.ParseNode(n, join)
		if !reflect.DeepEqual(a, b) {
			t.Fatal("translate.ParseNode is not deterministic")
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
