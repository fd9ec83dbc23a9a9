package egressip

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/translatetest"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// eipObject is an EgressIP with status items "ip@node" and its pods.
func eipObject(name string, items []string, pods ...string) EgressIPObject {
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, it := range items {
		ip, node, _ := strings.Cut(it, "@")
		e.Spec.EgressIPs = append(e.Spec.EgressIPs, ip)
		e.Status.Items = append(e.Status.Items, egressipv1.EgressIPStatusItem{EgressIP: ip, Node: node})
	}
	sel := EgressIPPods{}
	for _, p := range pods {
		a := netip.MustParseAddr(p)
		sel[ipfamily.Of(a)] = append(sel[ipfamily.Of(a)], a)
	}
	return EgressIPObject{EgressIP: e, Pods: sel}
}

func eipInput(w *translatetest.World, objs ...EgressIPObject) EgressIPRowsInput {
	return EgressIPRowsInput{Config: w.In.Config, Nodes: w.In.Nodes, Objects: objs}
}

// The rows of EgressIPs, compared with golden files: per (object, family)
// one set, one ECMP reroute and the allow policies; SNAT per pod on 23.03,
// one matching row per (object, node, family) with NAT.match.
func TestEgressIPRowsGolden(t *testing.T) {
	cases := []struct {
		name  string
		build func() EgressIPRowsInput
	}{
		{"egressip-v4-per-pod", func() EgressIPRowsInput {
			w := translatetest.NewWorld(3)
			in := eipInput(w,
				eipObject("blue", []string{"172.18.0.100@node2", "172.18.0.101@node3"}, "10.244.1.5", "10.244.1.6", "10.244.2.7"),
				eipObject("red", []string{"172.18.0.110@node2"}, "10.244.3.8"))
			// An EgressService endpoint: rerouted by the service (101), no EgressIP SNAT.
			in.Served = map[netip.Addr]bool{netip.MustParseAddr("10.244.1.6"): true}
			return in
		}},
		{"egressip-dual-natmatch", func() EgressIPRowsInput {
			w := translatetest.NewWorld(3, ipfamily.V4, ipfamily.V6)
			w.In.Config.NATMatch = true
			return eipInput(w,
				eipObject("blue", []string{"172.18.0.100@node2", "fc00:f853:ccd:e793::100@node3"},
					"10.244.1.5", "fd00:10:244:1::5", "10.244.2.7", "fd00:10:244:2::7"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := TranslateEgressIPs(c.build())
			if len(d.Problems) > 0 {
				t.Errorf("problems: %v", d.Problems)
			}
			translatetest.GoldenDesired(t, c.name, d)
		})
	}
}

func TestEgressIPRows(t *testing.T) {
	count := func(d *translate.Desired, k translate.Key) (sets, reroutes, allows, nats int, hops []string) {
		r := d.Rows[k]
		if r == nil {
			return
		}
		for _, p := range r.Policies {
			switch p.Action {
			case translate.ActionReroute:
				reroutes++
				hops = append(hops, p.Nexthops...)
				if p.Priority != EgressIPReroutePriority {
					t.Errorf("reroute at priority %d", p.Priority)
				}
			case translate.ActionAllow:
				allows++
			}
		}
		return len(r.AddressSets), reroutes, allows, len(r.NATs), hops
	}
	t.Run("two IPs on two nodes are ECMP next hops, one SNAT row each with NAT.match", func(t *testing.T) {
		w := translatetest.NewWorld(3)
		w.In.Config.NATMatch = true
		d := TranslateEgressIPs(eipInput(w, eipObject("a", []string{"172.18.0.100@node3", "172.18.0.101@node2"}, "10.244.1.5", "10.244.1.6")))
		sets, rr, al, nats, hops := count(d, translate.EgressIPKey("a"))
		if sets != 1 || rr != 1 || al != 2 || nats != 2 || strings.Join(hops, ",") != "100.64.0.3,100.64.0.4" {
			t.Errorf("sets %d reroutes %d allows %d nats %d hops %v", sets, rr, al, nats, hops)
		}
		for _, n := range d.Rows[translate.EgressIPKey("a")].NATs {
			if n.Priority != NATEgressIPPriority || n.Priority >= translate.NATServicePriority || !strings.Contains(n.Match, "$") {
				t.Errorf("NAT row %+v: want a match on the set, priority below an EgressService's", n)
			}
		}
	})
	t.Run("without NAT.match one SNAT row per pod and node", func(t *testing.T) {
		w := translatetest.NewWorld(3)
		d := TranslateEgressIPs(eipInput(w, eipObject("a", []string{"172.18.0.100@node3", "172.18.0.101@node2"}, "10.244.1.5", "10.244.1.6")))
		if _, _, _, nats, _ := count(d, translate.EgressIPKey("a")); nats != 4 {
			t.Errorf("%d NAT rows, want 2 pods × 2 nodes", nats)
		}
	})
	t.Run("nothing assigned: no rows, the pods keep their node's SNAT", func(t *testing.T) {
		w := translatetest.NewWorld(2)
		d := TranslateEgressIPs(eipInput(w, eipObject("a", nil, "10.244.1.5")))
		if len(d.Rows) != 0 || len(d.Problems) != 0 {
			t.Errorf("rows %v problems %v", d.Rows, d.Problems)
		}
	})
	t.Run("no pods selected: no rows", func(t *testing.T) {
		w := translatetest.NewWorld(2)
		d := TranslateEgressIPs(eipInput(w, eipObject("a", []string{"172.18.0.100@node2"})))
		if len(d.Rows) != 0 {
			t.Errorf("rows %v", d.Rows)
		}
	})
	t.Run("an IPv4-only object leaves IPv6 alone in a dual-stack cluster", func(t *testing.T) {
		w := translatetest.NewWorld(2, ipfamily.V4, ipfamily.V6)
		d := TranslateEgressIPs(eipInput(w, eipObject("a", []string{"172.18.0.100@node2"}, "10.244.1.5", "fd00:10:244:1::5")))
		for _, s := range d.Rows[translate.EgressIPKey("a")].AddressSets {
			if s.ExternalIDs[translate.KeyFamily] != string(ipfamily.V4) {
				t.Errorf("a %s set for an IPv4-only EgressIP", s.ExternalIDs[translate.KeyFamily])
			}
		}
	})
	t.Run("a pod selected by two objects leaves through the first by name, with a problem on the other", func(t *testing.T) {
		w := translatetest.NewWorld(3)
		d := TranslateEgressIPs(eipInput(w,
			eipObject("b", []string{"172.18.0.101@node3"}, "10.244.1.5", "10.244.1.6"),
			eipObject("a", []string{"172.18.0.100@node2"}, "10.244.1.5")))
		if got := d.Rows[translate.EgressIPKey("b")].AddressSets[0].Addresses; strings.Join(got, ",") != "10.244.1.6" {
			t.Errorf("b's set %v, want only the pod a does not select", got)
		}
		if ps := d.Problems.For("b"); len(ps) != 1 || ps[0].Reason != ReasonPodSelectedTwice || !strings.Contains(ps[0].Message, "10.244.1.5 (a)") {
			t.Errorf("b's problems %v", ps)
		}
		if ps := d.Problems.For("a"); len(ps) != 0 {
			t.Errorf("a's problems %v", ps)
		}
	})
	t.Run("an assigned node without a join address takes no traffic, with a problem", func(t *testing.T) {
		w := translatetest.NewWorld(3)
		w.In.Nodes["node3"].JoinIPs = nil
		d := TranslateEgressIPs(eipInput(w, eipObject("a", []string{"172.18.0.100@node3", "172.18.0.101@node2"}, "10.244.1.5"),
			eipObject("gone", []string{"172.18.0.102@node9"}, "10.244.2.5")))
		_, _, _, nats, hops := count(d, translate.EgressIPKey("a"))
		if strings.Join(hops, ",") != "100.64.0.3" || nats != 1 {
			t.Errorf("hops %v nats %d, want node2's only", hops, nats)
		}
		if d.Rows[translate.EgressIPKey("gone")] != nil {
			t.Error("an object whose only node is unknown has rows")
		}
		for _, name := range []string{"a", "gone"} {
			if ps := d.Problems.For(name); len(ps) != 1 || ps[0].Reason != ReasonEgressNodeUnusable {
				t.Errorf("%s: problems %v", name, ps)
			}
		}
	})
	t.Run("every row is owned under the object's key, and the key names it", func(t *testing.T) {
		w := translatetest.NewWorld(3)
		d := TranslateEgressIPs(eipInput(w, eipObject("node1", []string{"172.18.0.100@node2"}, "10.244.1.5")))
		k := translate.EgressIPKey("node1")
		r := d.Rows[k]
		var all []map[string]string
		for _, s := range r.AddressSets {
			all = append(all, s.ExternalIDs)
		}
		for _, p := range r.Policies {
			all = append(all, p.ExternalIDs)
		}
		for _, n := range r.NATs {
			all = append(all, n.ExternalIDs)
		}
		for _, ids := range all {
			if got, ok := translate.KeyOf(ids); !ok || got != k {
				t.Errorf("KeyOf(%v) = %q, %v; want %q (an EgressIP named like a node is not the node's)", ids, got, ok, k)
			}
		}
		if name, ok := k.EgressIP(); !ok || name != "node1" {
			t.Errorf("EgressIP() = %q, %v", name, ok)
		}
		if _, ok := translate.NodeKey("node1").EgressIP(); ok {
			t.Error("a node key is an EgressIP key")
		}
	})
}
