package egressip_test

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// eipNode is an assignable, Ready, reachable node on 172.18.0.0/16 and
// fc00:f853:ccd:e793::/64 whose own addresses are .N and ::N.
func eipNode(name string, n int, mutate ...func(*egressip.EgressIPNode)) *egressip.EgressIPNode {
	node := &egressip.EgressIPNode{Name: name, Ready: true, Reachable: true, Assignable: true,
		Primary:   []netip.Prefix{netip.MustParsePrefix("172.18.0.0/16"), netip.MustParsePrefix("fc00:f853:ccd:e793::/64")},
		Addresses: []netip.Addr{netip.MustParseAddr(fmt.Sprintf("172.18.0.%d", n)), netip.MustParseAddr(fmt.Sprintf("fc00:f853:ccd:e793::%d", n))}}
	for _, m := range mutate {
		m(node)
	}
	return node
}

func eip(name string, ips []string, status ...string) *egressipv1.EgressIP {
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: egressipv1.EgressIPSpec{EgressIPs: ips}}
	for i := 0; i+1 < len(status); i += 2 {
		e.Status.Items = append(e.Status.Items, egressipv1.EgressIPStatusItem{EgressIP: status[i], Node: status[i+1]})
	}
	return e
}

func nodesOf(ns ...*egressip.EgressIPNode) map[string]*egressip.EgressIPNode {
	out := map[string]*egressip.EgressIPNode{}
	for _, n := range ns {
		out[n.Name] = n
	}
	return out
}

// items renders status.items as "ip@node ..." for comparison.
func items(its []egressipv1.EgressIPStatusItem) string {
	var out []string
	for _, it := range its {
		out = append(out, it.EgressIP+"@"+it.Node)
	}
	return strings.Join(out, " ")
}

func TestAssignEgressIPs(t *testing.T) {
	notReady := func(n *egressip.EgressIPNode) { n.Ready = false }
	unreachable := func(n *egressip.EgressIPNode) { n.Reachable = false }
	unlabelled := func(n *egressip.EgressIPNode) { n.Assignable = false }
	recovering := func(n *egressip.EgressIPNode) { n.Recovering = true }
	otherNet := func(n *egressip.EgressIPNode) { n.Primary = []netip.Prefix{netip.MustParsePrefix("192.168.10.0/24")} }
	secondary := func(n *egressip.EgressIPNode) {
		n.HostNetworks = []netip.Prefix{netip.MustParsePrefix("192.168.20.0/24")}
	}
	tests := []struct {
		name     string
		eips     []*egressipv1.EgressIP
		nodes    map[string]*egressip.EgressIPNode
		want     map[string]string // object → items
		problems []string          // "object: Reason" in order
	}{
		{
			name:  "one IP goes to the first node by name",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100"})},
			nodes: nodesOf(eipNode("node2", 2), eipNode("node1", 1)),
			want:  map[string]string{"a": "172.18.0.100@node1"},
		},
		{
			name:  "two IPs of one object go to two nodes",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100", "172.18.0.101"})},
			nodes: nodesOf(eipNode("node1", 1), eipNode("node2", 2)),
			want:  map[string]string{"a": "172.18.0.100@node1 172.18.0.101@node2"},
		},
		{
			name:     "one IP of an object per node: the second stays unassigned on a one-node cluster",
			eips:     []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100", "172.18.0.101"})},
			nodes:    nodesOf(eipNode("node1", 1)),
			want:     map[string]string{"a": "172.18.0.100@node1"},
			problems: []string{"a: NoMatchingNodeFound"},
		},
		{
			name:  "fewest assignments first",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100"}, "172.18.0.100", "node1"), eip("b", []string{"172.18.0.101"})},
			nodes: nodesOf(eipNode("node1", 1), eipNode("node2", 2)),
			want:  map[string]string{"a": "172.18.0.100@node1", "b": "172.18.0.101@node2"},
		},
		{
			name:  "a node in its hold-down is a last resort: the loaded steady node wins, and it keeps what it holds",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100"}, "172.18.0.100", "node2"), eip("b", []string{"172.18.0.101"}, "172.18.0.101", "node1"), eip("c", []string{"172.18.0.102"})},
			nodes: nodesOf(eipNode("node1", 1, recovering), eipNode("node2", 2)),
			want:  map[string]string{"a": "172.18.0.100@node2", "b": "172.18.0.101@node1", "c": "172.18.0.102@node2"},
		},
		{
			name:  "a node in its hold-down takes an IP no other node can",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100", "172.18.0.101"})},
			nodes: nodesOf(eipNode("node1", 1, recovering), eipNode("node2", 2)),
			want:  map[string]string{"a": "172.18.0.100@node2 172.18.0.101@node1"},
		},
		{
			name:  "sticky: a valid assignment stays even where a less loaded node exists",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100"}, "172.18.0.100", "node3")},
			nodes: nodesOf(eipNode("node1", 1), eipNode("node2", 2), eipNode("node3", 3)),
			want:  map[string]string{"a": "172.18.0.100@node3"},
		},
		{
			name: "a node not Ready, unreachable or unlabelled loses its IP; it moves",
			eips: []*egressipv1.EgressIP{
				eip("a", []string{"172.18.0.100"}, "172.18.0.100", "node1"),
				eip("b", []string{"172.18.0.101"}, "172.18.0.101", "node2"),
				eip("c", []string{"172.18.0.102"}, "172.18.0.102", "node3")},
			nodes: nodesOf(eipNode("node1", 1, notReady), eipNode("node2", 2, unreachable), eipNode("node3", 3, unlabelled), eipNode("node4", 4)),
			want:  map[string]string{"a": "172.18.0.100@node4", "b": "172.18.0.101@node4", "c": "172.18.0.102@node4"},
		},
		{
			name:     "no node's network contains the IP",
			eips:     []*egressipv1.EgressIP{eip("a", []string{"10.99.0.1"})},
			nodes:    nodesOf(eipNode("node1", 1)),
			want:     map[string]string{"a": ""},
			problems: []string{"a: NoMatchingNodeFound"},
		},
		{
			name:  "an IP on a node's own primary network goes only to nodes on it",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"192.168.10.5"})},
			nodes: nodesOf(eipNode("node1", 1), eipNode("node2", 2, otherNet)),
			want:  map[string]string{"a": "192.168.10.5@node2"},
		},
		{
			name:  "bare metal: an IP of a host network (host-cidrs) goes to the nodes on it",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"192.168.20.7"})},
			nodes: nodesOf(eipNode("node1", 1), eipNode("node2", 2, secondary)),
			want:  map[string]string{"a": "192.168.20.7@node2"},
		},
		{
			name:     "an IP equal to a node's address is refused",
			eips:     []*egressipv1.EgressIP{eip("a", []string{"172.18.0.2", "172.18.0.100"})},
			nodes:    nodesOf(eipNode("node1", 1), eipNode("node2", 2)),
			want:     map[string]string{"a": "172.18.0.100@node1"},
			problems: []string{"a: EgressIPConflict"},
		},
		{
			name:     "not an address",
			eips:     []*egressipv1.EgressIP{eip("a", []string{"172.18.0.300", "fe80::1%eth0"})},
			nodes:    nodesOf(eipNode("node1", 1)),
			want:     map[string]string{"a": ""},
			problems: []string{"a: InvalidEgressIP", "a: InvalidEgressIP"},
		},
		{
			name:     "two objects claim one IP: the first by name gets it",
			eips:     []*egressipv1.EgressIP{eip("b", []string{"172.18.0.100"}), eip("a", []string{"172.18.0.100"})},
			nodes:    nodesOf(eipNode("node1", 1)),
			want:     map[string]string{"a": "172.18.0.100@node1", "b": ""},
			problems: []string{"b: UnsupportedRequest"},
		},
		{
			name:     "two objects claim one IP: the one holding it keeps it",
			eips:     []*egressipv1.EgressIP{eip("b", []string{"172.18.0.100"}, "172.18.0.100", "node1"), eip("a", []string{"172.18.0.100"})},
			nodes:    nodesOf(eipNode("node1", 1)),
			want:     map[string]string{"a": "", "b": "172.18.0.100@node1"},
			problems: []string{"a: UnsupportedRequest"},
		},
		{
			name:  "a stale status item (an IP no longer in spec, two on one node) is dropped",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100", "172.18.0.101"}, "172.18.0.99", "node1", "172.18.0.100", "node1", "172.18.0.101", "node1")},
			nodes: nodesOf(eipNode("node1", 1), eipNode("node2", 2)),
			want:  map[string]string{"a": "172.18.0.100@node1 172.18.0.101@node2"},
		},
		{
			name:  "dual stack: one IP per family, on two nodes; written canonically",
			eips:  []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100", "FC00:F853:CCD:E793::100"})},
			nodes: nodesOf(eipNode("node1", 1), eipNode("node2", 2)),
			want:  map[string]string{"a": "172.18.0.100@node1 fc00:f853:ccd:e793::100@node2"},
		},
		{
			name:     "no nodes at all",
			eips:     []*egressipv1.EgressIP{eip("a", []string{"172.18.0.100"})},
			want:     map[string]string{"a": ""},
			problems: []string{"a: NoMatchingNodeFound"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := egressip.AssignEgressIPs(egressip.EgressIPInput{EgressIPs: tc.eips, Nodes: tc.nodes})
			for obj, want := range tc.want {
				if got := items(res.Items[obj]); got != want {
					t.Errorf("%s: items %q, want %q", obj, got, want)
				}
			}
			var got []string
			for _, p := range res.Problems {
				got = append(got, p.Key+": "+string(p.Reason))
				if p.Message == "" {
					t.Errorf("problem without a message: %v", p)
				}
			}
			if !slices.Equal(got, tc.problems) {
				t.Errorf("problems %v, want %v\n%v", got, tc.problems, res.Problems)
			}
			// Assignment is a fixed point: written back, it changes nothing.
			for _, e := range tc.eips {
				e.Status.Items = res.Items[e.Name]
			}
			again := egressip.AssignEgressIPs(egressip.EgressIPInput{EgressIPs: tc.eips, Nodes: tc.nodes})
			for _, e := range tc.eips {
				if again.Changed(e) {
					t.Errorf("%s: reassigned on a second pass: %q → %q", e.Name, items(e.Status.Items), items(again.Items[e.Name]))
				}
			}
		})
	}
}

// TestParseEgressIPNode reads the label, readiness and both annotations.
func TestParseEgressIPNode(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1",
		Labels: map[string]string{egressip.LabelEgressAssignable: ""},
		Annotations: map[string]string{
			translate.AnnotPrimaryIfAddr: `{"ipv4":"172.18.0.2/16","ipv6":"fc00:f853:ccd:e793::2/64"}`,
			translate.AnnotHostCIDRs:     `["172.18.0.2/16","192.168.20.2/24","fc00:f853:ccd:e793::2/64"]`,
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	got := egressip.ParseEgressIPNode(n, true)
	if !got.Assignable || !got.Ready || !got.Reachable {
		t.Errorf("flags %+v", got)
	}
	if len(got.Primary) != 2 || got.Primary[0].String() != "172.18.0.0/16" || got.Primary[1].String() != "fc00:f853:ccd:e793::/64" {
		t.Errorf("primary networks %v", got.Primary)
	}
	if len(got.HostNetworks) != 3 || got.HostNetworks[1].String() != "192.168.20.0/24" {
		t.Errorf("host networks %v", got.HostNetworks)
	}
	if !slices.Contains(got.Addresses, netip.MustParseAddr("192.168.20.2")) {
		t.Errorf("addresses %v", got.Addresses)
	}
	delete(n.Labels, egressip.LabelEgressAssignable)
	if egressip.ParseEgressIPNode(n, true).Assignable {
		t.Error("a node without the label is assignable")
	}
}

func TestSelectEgressIPPods(t *testing.T) {
	subnets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}
	ns := func(name string, kv ...string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
		return n
	}
	pod := func(namespace, name string, mutate func(*corev1.Pod), ips ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": "web"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	namespaces := []*corev1.Namespace{ns("prod", "env", "prod"), ns("prod2", "env", "prod"), ns("dev", "env", "dev")}
	pods := []*corev1.Pod{
		pod("prod", "a", nil, "10.244.1.5", "fd00:10:244:1::5"),
		pod("prod2", "b", nil, "10.244.2.7"),
		pod("prod", "db", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "db"} }, "10.244.1.9"),
		pod("dev", "c", nil, "10.244.3.4"),
		pod("prod", "host", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "172.18.0.2"),
		pod("prod", "done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, "10.244.1.6"),
		pod("prod", "failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, "10.244.1.8"),
		pod("prod", "pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, "10.244.1.10"),
		pod("prod", "outside", nil, "192.168.1.1"),
	}
	render := func(got egressip.EgressIPPods) string {
		var out []string
		for _, f := range []ipfamily.Family{ipfamily.V4, ipfamily.V6} {
			for _, a := range got[f] {
				out = append(out, a.String())
			}
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		name     string
		spec     egressipv1.EgressIPSpec
		want     string
		problems int
	}{
		{"namespaces only", egressipv1.EgressIPSpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
			"10.244.1.5 10.244.1.9 10.244.1.10 10.244.2.7 fd00:10:244:1::5", 0},
		{"and a pod selector", egressipv1.EgressIPSpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			"10.244.1.5 10.244.1.10 10.244.2.7 fd00:10:244:1::5", 0},
		{"an empty namespace selector selects every namespace", egressipv1.EgressIPSpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
			"10.244.1.9", 0},
		{"an invalid selector selects nothing, with a problem", egressipv1.EgressIPSpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}},
			"", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := egressip.SelectEgressIPPods(&egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e"}, Spec: tc.spec}, namespaces, pods, subnets)
			if s := render(got); s != tc.want {
				t.Errorf("selected %q, want %q", s, tc.want)
			}
			if len(problems) != tc.problems || (tc.problems > 0 && problems[0].Reason != egressip.ReasonInvalidSelector) {
				t.Errorf("problems %v, want %d InvalidSelector", problems, tc.problems)
			}
		})
	}
}

// TestAssignEgressIPsRefusesRoutersAndSpecialAddresses: an egress IP the
// holding node would answer for in place of a router or a whole segment —
// a node's gateway, a network's network or broadcast address, link-local,
// multicast, loopback or unspecified — is refused with the reason, never
// assigned; an address beside them on the same network is assigned.
func TestAssignEgressIPsRefusesRoutersAndSpecialAddresses(t *testing.T) {
	gw := func(n *egressip.EgressIPNode) {
		n.Gateways = []netip.Addr{netip.MustParseAddr("172.18.0.1"), netip.MustParseAddr("fc00:f853:ccd:e793::1")}
		n.HostNetworks = []netip.Prefix{netip.MustParsePrefix("192.168.20.0/24"), netip.MustParsePrefix("10.10.0.0/31")}
	}
	nodes := nodesOf(eipNode("node1", 11, gw), eipNode("node2", 12, gw))
	for _, tc := range []struct{ ip, reason, why string }{
		{"172.18.0.1", "EgressIPConflict", "is the gateway of node node1"},
		{"fc00:f853:ccd:e793::1", "EgressIPConflict", "is the gateway of node node1"},
		{"172.18.0.0", "EgressIPConflict", "is the network address of 172.18.0.0/16"},
		{"172.18.255.255", "EgressIPConflict", "is the broadcast address of 172.18.0.0/16"},
		{"192.168.20.255", "EgressIPConflict", "is the broadcast address of 192.168.20.0/24"},
		{"fc00:f853:ccd:e793::", "EgressIPConflict", "is the network address of fc00:f853:ccd:e793::/64"},
		{"172.18.0.12", "EgressIPConflict", "is an address of node node2"},
		{"169.254.0.10", "InvalidEgressIP", "is link-local"},
		{"fe80::10", "InvalidEgressIP", "is link-local"},
		{"224.0.0.5", "InvalidEgressIP", "is multicast"},
		{"127.0.0.1", "InvalidEgressIP", "is a loopback address"},
		{"0.0.0.0", "InvalidEgressIP", "is unspecified"},
	} {
		res := egressip.AssignEgressIPs(egressip.EgressIPInput{EgressIPs: []*egressipv1.EgressIP{eip("a", []string{tc.ip, "172.18.0.100"})}, Nodes: nodes})
		if got := items(res.Items["a"]); got != "172.18.0.100@node1" {
			t.Errorf("%s: assigned %q, want only 172.18.0.100@node1", tc.ip, got)
		}
		ps := res.Problems.For("a")
		if len(ps) != 1 || string(ps[0].Reason) != tc.reason || !strings.Contains(ps[0].Message, tc.ip+" "+tc.why) {
			t.Errorf("%s: problems %v, want %s %q", tc.ip, ps, tc.reason, tc.why)
		}
	}
	// The two ends of a point-to-point /31 are addresses like any other.
	res := egressip.AssignEgressIPs(egressip.EgressIPInput{EgressIPs: []*egressipv1.EgressIP{eip("p2p", []string{"10.10.0.0"})}, Nodes: nodes})
	if got := items(res.Items["p2p"]); got != "10.10.0.0@node1" {
		t.Errorf("an address of a /31: %q, want 10.10.0.0@node1", got)
	}
}
