package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

type setRow struct {
	name, nexthop string
	addrs         []string
}

// hostSets returns the reroute sets of one zone's translation: key → set.
func hostSets(d *translate.Desired) map[string]setRow {
	out := map[string]setRow{}
	for k, r := range d.Rows {
		for _, as := range r.AddressSets {
			if as.ExternalIDs[translate.KeyOwnerType] == translate.OwnerNodeIPs {
				continue
			}
			row := setRow{name: as.Name, addrs: as.Addresses}
			for _, p := range r.Policies {
				if p.Action == translate.ActionReroute && strings.Contains(p.Match, "$"+as.Name) {
					row.nexthop = strings.Join(p.Nexthops, ",")
				}
			}
			out[string(k)+"/"+as.ExternalIDs[translate.KeyOwnerType]+"/"+as.ExternalIDs[translate.KeyFamily]] = row
		}
	}
	return out
}

// TestZones: per-zone translation (one node per zone) against the central
// single zone.
func TestZones(t *testing.T) {
	build := func() *world {
		w := icWorld(3, ipfamily.V4, ipfamily.V6)
		w.ES("ns/web", "node2")
		w.Svc("ns/web", "172.18.0.100", "fc00:f853:ccd:e793::100")
		w.EPs("ns/web", "10.244.1.5@node1", "fd00:10:244:1::5@node1", "10.244.2.5@node2", "10.244.3.5@node3")
		w.Ready("node2", "ns/web")
		return w
	}
	cases := []struct {
		zone string
		want map[string]setRow
	}{
		// Central: one zone with every node, as before.
		{"", map[string]setRow{
			"node/node2/EgressServiceHost/v4": {nexthop: "10.244.2.2", addrs: []string{"10.244.1.5", "10.244.2.5", "10.244.3.5"}},
			"node/node2/EgressServiceHost/v6": {nexthop: "fd00:10:244:2::2", addrs: []string{"fd00:10:244:1::5"}},
		}},
		// The host's zone: every endpoint the host serves, to its management port.
		{"node2", map[string]setRow{
			"node/node2/EgressServiceHost/v4": {nexthop: "10.244.2.2", addrs: []string{"10.244.1.5", "10.244.2.5", "10.244.3.5"}},
			"node/node2/EgressServiceHost/v6": {nexthop: "fd00:10:244:2::2", addrs: []string{"fd00:10:244:1::5"}},
		}},
		// Another zone: its local endpoints, to the host's transit address (both families).
		{"node1", map[string]setRow{
			"node/node2/EgressServiceHost/v4": {nexthop: "100.88.0.3", addrs: []string{"10.244.1.5"}},
			"node/node2/EgressServiceHost/v6": {nexthop: "fd97::3", addrs: []string{"fd00:10:244:1::5"}},
		}},
		// The policies exist whether or not the zone has endpoints of a
		// family: endpoint churn never adds or removes a policy.
		{"node3", map[string]setRow{
			"node/node2/EgressServiceHost/v4": {nexthop: "100.88.0.3", addrs: []string{"10.244.3.5"}},
			"node/node2/EgressServiceHost/v6": {nexthop: "fd97::3", addrs: []string{}},
		}},
	}
	for _, c := range cases {
		t.Run("zone="+c.zone, func(t *testing.T) {
			w := build()
			w.In.Zone = c.zone
			got := hostSets(Translate(w.In))
			if len(got) != len(c.want) {
				t.Fatalf("sets %v, want %v", got, c.want)
			}
			for k, want := range c.want {
				g, ok := got[k]
				if !ok || g.nexthop != want.nexthop || !slices.Equal(g.addrs, want.addrs) {
					t.Errorf("%s = %+v, want %+v", k, g, want)
				}
			}
		})
	}
}

// TestZonesGatewayAndNetwork: NAT rows only in the host's zone; Network
// mode reroutes each zone's own endpoints to its own node.
func TestZonesGatewayAndNetwork(t *testing.T) {
	w := icWorld(3)
	w.In.Config.Backend = translate.BackendOVN
	w.ES("ns/gw", "node2")
	w.Svc("ns/gw", "172.18.0.100")
	w.EPs("ns/gw", "10.244.1.5@node1", "10.244.2.5@node2")
	w.ES("ns/net", "ALL")
	w.Svc("ns/net")
	w.EPs("ns/net", "10.244.1.9@node1", "10.244.3.9@node3")
	w.Ready("node1", "ns/net")
	w.Ready("node3", "ns/net")
	for zone, want := range map[string]struct{ nats, sets int }{"node1": {0, 2}, "node2": {2, 1}, "node3": {0, 2}} {
		w.In.Zone = zone
		d := Translate(w.In)
		_, _, nats, _ := d.Count()
		if nats != want.nats || len(hostSets(d)) != want.sets {
			t.Errorf("zone %s: %d NAT rows and sets %v, want %d and %d sets", zone, nats, hostSets(d), want.nats, want.sets)
		}
	}
	w.In.Zone = "node1"
	sets := hostSets(Translate(w.In))
	if g := sets["node/node2/EgressServiceGateway/v4"]; g.nexthop != "100.88.0.3" || !slices.Equal(g.addrs, []string{"10.244.1.5"}) {
		t.Errorf("remote gateway set in zone node1: %+v", g)
	}
	if g := sets["node/node1/EgressServiceNetwork/v4"]; g.nexthop != "10.244.1.2" || !slices.Equal(g.addrs, []string{"10.244.1.9"}) {
		t.Errorf("network set in zone node1: %+v", g)
	}
}

// TestZoneMissingTransit: a host in another zone without a transit address
// is a problem and no rows, never a crash.
func TestZoneMissingTransit(t *testing.T) {
	w := icWorld(2)
	delete(w.Raw["node2"].Annotations, translate.AnnotTransitIfAddr)
	w.In.Nodes["node2"] = translate.ParseNode(w.Raw["node2"], w.In.Config.JoinSubnets)
	w.ES("ns/web", "node2")
	w.Svc("ns/web", "172.18.0.100")
	w.EPs("ns/web", "10.244.1.5@node1")
	w.Ready("node2", "ns/web")
	w.In.Zone = "node1"
	d := Translate(w.In)
	if sets := hostSets(d); len(sets) != 0 {
		t.Errorf("rows without a transit address: %v", sets)
	}
	if p := d.Problems.For("ns/web"); len(p) != 1 || p[0].Reason != translate.ReasonTransitAddressMissing {
		t.Errorf("problems %v", p)
	}
	if !translate.Interconnect(w.In.Nodes) {
		t.Error("Interconnect() false with one zone per node")
	}
	if got := translate.Zones(w.In.Nodes); !slices.Equal(got, []string{"node1", "node2"}) {
		t.Errorf("zones %v", got)
	}
}

// TestZoneClusterRoute: the host's zone gets the src-ip route of the
// cluster subnets to the host's GR, unless someone else has one.
func TestZoneClusterRoute(t *testing.T) {
	w := icWorld(2, ipfamily.V4, ipfamily.V6)
	w.ES("ns/web", "node2")
	w.Svc("ns/web", "172.18.0.100")
	w.EPs("ns/web", "10.244.1.5@node1")
	w.In.Zone = "node2"
	routes := Translate(w.In).Rows[translate.NodeKey("node2")].Routes
	if len(routes) != 2 || routes[0].IPPrefix != "10.244.0.0/16" || routes[0].Nexthop != "100.64.0.3" || routes[0].Policy != "src-ip" ||
		routes[1].IPPrefix != "fd00:10:244::/48" || routes[1].Nexthop != "fd98::3" {
		t.Fatalf("routes %+v", routes)
	}
	w.In.ForeignClusterRoutes = map[netip.Prefix]bool{netip.MustParsePrefix("10.244.0.0/16"): true}
	if routes := Translate(w.In).Rows[translate.NodeKey("node2")].Routes; len(routes) != 1 || routes[0].IPPrefix != "fd00:10:244::/48" {
		t.Errorf("with a foreign IPv4 route: %+v", routes)
	}
	w.In.Zone = "node1"
	if r := Translate(w.In).Rows[translate.NodeKey("node2")]; r == nil || len(r.Routes) != 0 {
		t.Errorf("another zone got routes: %+v", r)
	}
	w.In.Zone = ""
	if routes := Translate(w.In).Rows[translate.NodeKey("node2")].Routes; len(routes) != 0 {
		t.Errorf("central mode got routes: %+v", routes)
	}
}
