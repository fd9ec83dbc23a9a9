package translate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// icWorld makes every node its own zone with a transit-switch address
// (100.88.0.i+1/16, fd97::i+1/64), as current ovn-kubernetes does.
func icWorld(n int, fams ...ipfamily.Family) *world {
	w := newWorld(n, fams...)
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("node%d", i)
		raw := w.raw[name]
		var parts []string
		for _, f := range w.families {
			if f == ipfamily.V4 {
				parts = append(parts, fmt.Sprintf(`"ipv4":"100.88.0.%d/16"`, i+1))
			} else {
				parts = append(parts, fmt.Sprintf(`"ipv6":"fd97::%x/64"`, i+1))
			}
		}
		raw.Annotations[AnnotTransitIfAddr] = "{" + strings.Join(parts, ",") + "}"
		raw.Annotations[AnnotZoneName] = name
		w.in.Nodes[name] = ParseNode(raw, w.in.Config.JoinSubnets)
	}
	return w
}

type setRow struct {
	name, nexthop string
	addrs         []string
}

// hostSets returns the reroute sets of one zone's translation: key → set.
func hostSets(d *Desired) map[string]setRow {
	out := map[string]setRow{}
	for k, r := range d.Rows {
		for _, as := range r.AddressSets {
			if as.ExternalIDs[KeyOwnerType] == OwnerNodeIPs {
				continue
			}
			row := setRow{name: as.Name, addrs: as.Addresses}
			for _, p := range r.Policies {
				if p.Action == ActionReroute && strings.Contains(p.Match, "$"+as.Name) {
					row.nexthop = strings.Join(p.Nexthops, ",")
				}
			}
			out[string(k)+"/"+as.ExternalIDs[KeyOwnerType]+"/"+as.ExternalIDs[KeyFamily]] = row
		}
	}
	return out
}

// TestZones: per-zone translation (one node per zone) against the central
// single zone.
func TestZones(t *testing.T) {
	build := func() *world {
		w := icWorld(3, ipfamily.V4, ipfamily.V6)
		w.es("ns/web", "node2")
		w.svc("ns/web", "172.18.0.100", "fc00:f853:ccd:e793::100")
		w.eps("ns/web", "10.244.1.5@node1", "fd00:10:244:1::5@node1", "10.244.2.5@node2", "10.244.3.5@node3")
		w.ready("node2", "ns/web")
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
			w.in.Zone = c.zone
			got := hostSets(Translate(w.in))
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
	w.in.Config.Backend = BackendOVN
	w.es("ns/gw", "node2")
	w.svc("ns/gw", "172.18.0.100")
	w.eps("ns/gw", "10.244.1.5@node1", "10.244.2.5@node2")
	w.es("ns/net", "ALL")
	w.svc("ns/net")
	w.eps("ns/net", "10.244.1.9@node1", "10.244.3.9@node3")
	w.ready("node1", "ns/net")
	w.ready("node3", "ns/net")
	for zone, want := range map[string]struct{ nats, sets int }{"node1": {0, 2}, "node2": {2, 1}, "node3": {0, 2}} {
		w.in.Zone = zone
		d := Translate(w.in)
		_, _, nats, _ := d.Count()
		if nats != want.nats || len(hostSets(d)) != want.sets {
			t.Errorf("zone %s: %d NAT rows and sets %v, want %d and %d sets", zone, nats, hostSets(d), want.nats, want.sets)
		}
	}
	w.in.Zone = "node1"
	sets := hostSets(Translate(w.in))
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
	delete(w.raw["node2"].Annotations, AnnotTransitIfAddr)
	w.in.Nodes["node2"] = ParseNode(w.raw["node2"], w.in.Config.JoinSubnets)
	w.es("ns/web", "node2")
	w.svc("ns/web", "172.18.0.100")
	w.eps("ns/web", "10.244.1.5@node1")
	w.ready("node2", "ns/web")
	w.in.Zone = "node1"
	d := Translate(w.in)
	if sets := hostSets(d); len(sets) != 0 {
		t.Errorf("rows without a transit address: %v", sets)
	}
	if p := d.Problems.For("ns/web"); len(p) != 1 || p[0].Reason != ReasonTransitAddressMissing {
		t.Errorf("problems %v", p)
	}
	if !Interconnect(w.in.Nodes) {
		t.Error("Interconnect() false with one zone per node")
	}
	if got := Zones(w.in.Nodes); !slices.Equal(got, []string{"node1", "node2"}) {
		t.Errorf("zones %v", got)
	}
}

// TestZoneClusterRoute: the host's zone gets the src-ip route of the
// cluster subnets to the host's GR, unless someone else has one.
func TestZoneClusterRoute(t *testing.T) {
	w := icWorld(2, ipfamily.V4, ipfamily.V6)
	w.es("ns/web", "node2")
	w.svc("ns/web", "172.18.0.100")
	w.eps("ns/web", "10.244.1.5@node1")
	w.in.Zone = "node2"
	routes := Translate(w.in).Rows[NodeKey("node2")].Routes
	if len(routes) != 2 || routes[0].IPPrefix != "10.244.0.0/16" || routes[0].Nexthop != "100.64.0.3" || routes[0].Policy != "src-ip" ||
		routes[1].IPPrefix != "fd00:10:244::/48" || routes[1].Nexthop != "fd98::3" {
		t.Fatalf("routes %+v", routes)
	}
	w.in.ForeignClusterRoutes = map[netip.Prefix]bool{netip.MustParsePrefix("10.244.0.0/16"): true}
	if routes := Translate(w.in).Rows[NodeKey("node2")].Routes; len(routes) != 1 || routes[0].IPPrefix != "fd00:10:244::/48" {
		t.Errorf("with a foreign IPv4 route: %+v", routes)
	}
	w.in.Zone = "node1"
	if r := Translate(w.in).Rows[NodeKey("node2")]; r == nil || len(r.Routes) != 0 {
		t.Errorf("another zone got routes: %+v", r)
	}
	w.in.Zone = ""
	if routes := Translate(w.in).Rows[NodeKey("node2")].Routes; len(routes) != 0 {
		t.Errorf("central mode got routes: %+v", routes)
	}
}
