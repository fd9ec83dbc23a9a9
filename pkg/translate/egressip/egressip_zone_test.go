package egressip

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"github.com/ovn-egress/ovn-egress/pkg/translate/translatetest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// eipZoneRows is what one zone writes for one EgressIP: the reroute's set
// and next hops, the SNATs' set and the gateway routers holding them.
type eipZoneRows struct {
	reroute, hops, natSet string
	allows                int
	nats                  []string // GR:logical_ip
}

func eipZoneRowsOf(d *translate.Desired, name string) eipZoneRows {
	var out eipZoneRows
	r := d.Rows[translate.EgressIPKey(name)]
	if r == nil {
		return out
	}
	sets := map[string]string{}
	for _, as := range r.AddressSets {
		sets[as.Name] = strings.Join(as.Addresses, ",")
		if as.ExternalIDs[translate.KeyOwnerType] == translate.OwnerEgressIPNAT {
			out.natSet = sets[as.Name]
		}
	}
	for _, p := range r.Policies {
		switch p.Action {
		case translate.ActionReroute:
			out.reroute = sets[strings.TrimPrefix(p.Match, "ip4.src == $")]
			out.hops = strings.Join(p.Nexthops, ",")
		case translate.ActionAllow:
			out.allows++
		}
	}
	for _, n := range r.NATs {
		lip := n.LogicalIP
		if n.Match != "" {
			lip = sets[strings.TrimPrefix(n.Match, "ip4.src == $")]
		}
		out.nats = append(out.nats, n.Router+":"+lip)
	}
	slices.Sort(out.nats)
	return out
}

// pod is a running pod on node with address ip.
func zonePod(node, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + ip}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: ip}}}}
}

// TestEgressIPRowsInZones: in interconnect each zone writes the reroute of
// its own selected pods — to the GR of an egress node in the zone, to the
// transit address of one elsewhere — and the SNAT of the egress nodes in
// the zone, matching every selected pod (the other zones' arrive over the
// transit switch, routed to the GR by the cluster route, never rerouted
// again: a zone rerouting them would bounce them between egress nodes).
func TestEgressIPRowsInZones(t *testing.T) {
	pods := []*corev1.Pod{zonePod("node1", "10.244.1.5"), zonePod("node2", "10.244.2.7"), zonePod("node4", "10.244.4.9")}
	obj := eipObject("blue", []string{"172.18.0.100@node2", "172.18.0.101@node3"}, "10.244.1.5", "10.244.2.7")
	for _, natMatch := range []bool{true, false} {
		t.Run(fmt.Sprintf("NAT.match=%v", natMatch), func(t *testing.T) {
			w := translatetest.ICWorld(4)
			w.In.Config.NATMatch = natMatch
			both := "GR_%s:10.244.1.5,10.244.2.7"
			if !natMatch {
				both = "GR_%[1]s:10.244.1.5 GR_%[1]s:10.244.2.7"
			}
			nats := func(node string) []string { return strings.Fields(fmt.Sprintf(both, node)) }
			want := map[string]eipZoneRows{
				"node1": {reroute: "10.244.1.5", hops: "100.88.0.3,100.88.0.4", allows: 2},
				"node2": {reroute: "10.244.2.7", hops: "100.64.0.3,100.88.0.4", allows: 2, nats: nats("node2")},
				"node3": {nats: nats("node3")},
				"node4": {}, // its pod is not selected, no egress node there
			}
			for zone, wz := range want {
				if natMatch && len(wz.nats) > 0 {
					wz.natSet = "10.244.1.5,10.244.2.7"
				}
				in := eipInput(w, obj)
				in.InZone(zone, pods)
				d := TranslateEgressIPs(in)
				if len(d.Problems) > 0 {
					t.Errorf("zone %s: problems %v", zone, d.Problems)
				}
				if got := eipZoneRowsOf(d, "blue"); fmt.Sprint(got) != fmt.Sprint(wz) {
					t.Errorf("zone %s:\n got %+v\nwant %+v", zone, got, wz)
				}
			}
		})
	}

	t.Run("an egress node of another zone without a transit address carries none of this zone's traffic", func(t *testing.T) {
		w := translatetest.ICWorld(3)
		delete(w.In.Nodes["node3"].TransitIPs, w.Families[0])
		in := eipInput(w, obj)
		in.InZone("node1", pods)
		d := TranslateEgressIPs(in)
		if got := eipZoneRowsOf(d, "blue"); got.hops != "100.88.0.3" {
			t.Errorf("next hops %q, want node2's transit address alone", got.hops)
		}
		if p := d.Problems.For("blue"); len(p) != 1 || p[0].Reason != translate.ReasonTransitAddressMissing || !strings.Contains(p[0].Message, "node3") {
			t.Errorf("problems %v, want one %s naming node3", p, translate.ReasonTransitAddressMissing)
		}
	})

	t.Run("the egress node's zone routes the cluster's pod traffic to its GR", func(t *testing.T) {
		w := translatetest.ICWorld(3)
		for zone, want := range map[string]bool{"node1": false, "node3": true} {
			in := w.In
			in.Zone, in.EgressNodes = zone, map[string]bool{"node3": true}
			d := egressservice.Translate(in)
			var routes []string
			for _, r := range d.Rows {
				for _, rt := range r.Routes {
					routes = append(routes, rt.IPPrefix+" "+rt.Policy+" "+rt.Nexthop)
				}
			}
			if got := slices.Contains(routes, "10.244.0.0/16 src-ip 100.64.0.4"); got != want || (!want && len(routes) > 0) {
				t.Errorf("zone %s: routes %v, want the route to GR_node3 %v", zone, routes, want)
			}
		}
	})
}

func TestZonePodAddresses(t *testing.T) {
	pods := []*corev1.Pod{zonePod("a", "10.244.1.5"), zonePod("b", "10.244.2.7"), zonePod("", "10.244.9.9"),
		{Spec: corev1.PodSpec{NodeName: "a"}, Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "fd00::5"}, {IP: "bad"}}}}}
	zoneOf := map[string]string{"a": "east", "b": "west"}
	got := ZonePodAddresses(pods, func(n string) string { return zoneOf[n] }, "east")
	want := map[netip.Addr]bool{netip.MustParseAddr("10.244.1.5"): true, netip.MustParseAddr("fd00::5"): true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
