package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/translatetest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

func withNetwork(n string) func(*egressv1.EgressService) {
	return func(e *egressv1.EgressService) { e.Spec.Network = n }
}

// TestTranslateGolden renders the rows of each scenario as YAML and
// compares them with a golden file.
func TestTranslateGolden(t *testing.T) {
	cases := []struct {
		name  string
		build func() *world
	}{
		{"host-v4", func() *world {
			w := newWorld(3)
			w.ES("ns1/svc1", "node2")
			w.Svc("ns1/svc1", "172.18.0.100")
			w.EPs("ns1/svc1", "10.244.1.5@node1", "10.244.3.5@node3", "172.18.0.3@node2")
			w.Ready("node2", "ns1/svc1")
			return w
		}},
		{"host-v6", func() *world {
			w := newWorld(3, ipfamily.V6)
			w.ES("ns1/svc1", "node2")
			w.Svc("ns1/svc1", "fc00:f853:ccd:e793::100")
			w.EPs("ns1/svc1", "fd00:10:244:1::5@node1", "fd00:10:244:3::5@node3")
			w.Ready("node2", "ns1/svc1")
			return w
		}},
		{"host-dual", func() *world {
			w := newWorld(3, ipfamily.V4, ipfamily.V6)
			w.ES("ns1/svc1", "node2")
			w.Svc("ns1/svc1", "172.18.0.100", "fc00:f853:ccd:e793::100")
			w.EPs("ns1/svc1", "10.244.1.5@node1", "fd00:10:244:1::5@node1", "10.244.3.5@node3", "fd00:10:244:3::5@node3")
			w.Ready("node2", "ns1/svc1")
			return w
		}},
		{"gateway-dual", func() *world {
			w := newWorld(3, ipfamily.V4, ipfamily.V6)
			w.In.Config.Backend = translate.BackendOVN
			w.ES("ns1/svc1", "node2")
			w.Svc("ns1/svc1", "172.18.0.100", "fc00:f853:ccd:e793::100")
			w.EPs("ns1/svc1", "10.244.1.5@node1", "fd00:10:244:1::5@node1", "10.244.3.5@node3")
			// spec.network forces the host path even with the ovn backend.
			w.ES("ns1/svc2", "node2", withNetwork("100"))
			w.Svc("ns1/svc2", "172.18.0.101")
			w.EPs("ns1/svc2", "10.244.1.6@node1")
			w.Ready("node2", "ns1/svc2")
			return w
		}},
		{"gateway-dual-natmatch", func() *world {
			// An NB with NAT.match (OVN ≥ 24.09): one NAT row per (service,
			// family) over an address set of its endpoints, and the row
			// keeping GR_node2's own SNAT for traffic to node addresses.
			w := newWorld(3, ipfamily.V4, ipfamily.V6)
			w.In.Config.Backend = translate.BackendOVN
			w.In.Config.NATMatch = true
			w.In.Gateways = map[string]translate.GatewayInfo{"node2": {NATAddressesRouter: true, ExternalPortKnown: true,
				SNAT: map[ipfamily.Family]translate.GatewaySNAT{ipfamily.V4: {ExternalIP: netip.MustParseAddr("172.18.0.3"), PortRange: "32768-60999"}}}}
			w.ES("ns1/svc1", "node2")
			w.Svc("ns1/svc1", "172.18.0.100", "fc00:f853:ccd:e793::100")
			w.EPs("ns1/svc1", "10.244.1.5@node1", "fd00:10:244:1::5@node1", "10.244.3.5@node3")
			w.ES("ns1/svc3", "node2")
			w.Svc("ns1/svc3", "172.18.0.102")
			w.EPs("ns1/svc3", "10.244.2.7@node2")
			return w
		}},
		{"network-mode", func() *world {
			w := newWorld(3)
			w.AddNode(4, translate.GatewayModeLocal)
			w.ES("ns1/svc1", "ALL", withNetwork("100"))
			w.Svc("ns1/svc1")
			w.EPs("ns1/svc1", "10.244.1.5@node1", "10.244.1.6@node1", "10.244.2.5@node2", "10.244.4.5@node4")
			w.Ready("node1", "ns1/svc1")
			w.Ready("node4", "ns1/svc1")
			// node2's agent has not reported: its endpoint waits.
			return w
		}},
		{"several-services-one-host", func() *world {
			w := newWorld(3)
			for i, key := range []string{"ns1/a", "ns1/b", "ns2/c"} {
				w.ES(key, "node1")
				w.Svc(key, "172.18.0."+string(rune('1'+i))+"00")
				w.EPs(key, "10.244.2."+string(rune('5'+i))+"@node2")
			}
			w.Ready("node1", "ns1/a", "ns1/b", "ns2/c")
			return w
		}},
		{"problems", func() *world {
			w := newWorld(2, ipfamily.V4, ipfamily.V6)
			w.ES("ns/no-service", "node1")
			w.ES("ns/cluster-ip", "node1")
			w.Svc("ns/cluster-ip", "172.18.0.100").Spec.Type = corev1.ServiceTypeClusterIP
			w.ES("ns/no-ingress", "node1")
			w.Svc("ns/no-ingress")
			w.EPs("ns/no-ingress", "10.244.1.5@node1")
			w.ES("ns/no-endpoints", "node1")
			w.Svc("ns/no-endpoints", "172.18.0.101")
			w.EPs("ns/no-endpoints", "172.18.0.3@node2")
			w.ES("ns/no-host", "")
			w.Svc("ns/no-host", "172.18.0.102")
			w.EPs("ns/no-host", "10.244.1.6@node1")
			w.ES("ns/unknown-host", "node9")
			w.Svc("ns/unknown-host", "172.18.0.103")
			w.EPs("ns/unknown-host", "10.244.1.7@node1")
			w.ES("ns/two-ingress", "node1")
			w.Svc("ns/two-ingress", "172.18.0.104", "172.18.0.105")
			w.EPs("ns/two-ingress", "10.244.1.8@node1")
			w.Ready("node1", "ns/two-ingress")
			w.ES("ns/v6-without-ingress", "node1")
			w.Svc("ns/v6-without-ingress", "172.18.0.106")
			w.EPs("ns/v6-without-ingress", "10.244.1.9@node1", "fd00:10:244:1::9@node1")
			w.Ready("node1", "ns/v6-without-ingress")
			w.ES("ns/network-not-all", "node1", func(e *egressv1.EgressService) { e.Spec.SourceIPBy = egressv1.Network })
			w.Svc("ns/network-not-all")
			w.EPs("ns/network-not-all", "10.244.1.10@node1")
			w.ES("ns/not-ready", "node2")
			w.Svc("ns/not-ready", "172.18.0.107")
			w.EPs("ns/not-ready", "10.244.1.11@node1")
			return w
		}},
		{"shared-endpoint", func() *world {
			w := newWorld(3)
			w.ES("ns1/b", "node3")
			w.Svc("ns1/b", "172.18.0.101")
			w.EPs("ns1/b", "10.244.1.5@node1", "10.244.1.6@node1")
			w.ES("ns1/a", "node2")
			w.Svc("ns1/a", "172.18.0.100")
			w.EPs("ns1/a", "10.244.1.5@node1")
			w.Ready("node2", "ns1/a")
			w.Ready("node3", "ns1/b")
			return w
		}},
		{"unassigned-drop", func() *world {
			w := newWorld(2)
			w.In.Config.UnassignedTraffic = translate.UnassignedDrop
			w.ES("ns/no-host", "")
			w.Svc("ns/no-host", "172.18.0.102")
			w.EPs("ns/no-host", "10.244.1.6@node1")
			w.ES("ns/ok", "node2")
			w.Svc("ns/ok", "172.18.0.103")
			w.EPs("ns/ok", "10.244.1.7@node1")
			w.Ready("node2", "ns/ok")
			return w
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			translatetest.GoldenDesired(t, c.name, Translate(c.build().In))
		})
	}
}

func policyIDs(d *translate.Desired) []string {
	var ids []string
	for _, r := range d.Rows {
		for _, p := range r.Policies {
			ids = append(ids, p.ExternalIDs[translate.KeyID]+"|"+p.Match+"|"+strings.Join(p.Nexthops, ","))
		}
	}
	slices.Sort(ids)
	return ids
}

// TestEndpointChurnChangesNoPolicy: adding, removing and moving endpoints
// changes address sets (and NAT rows) but never a Logical_Router_Policy.
func TestEndpointChurnChangesNoPolicy(t *testing.T) {
	for _, backend := range []translate.Backend{translate.BackendHost, translate.BackendOVN} {
		t.Run(string(backend), func(t *testing.T) {
			build := func(eps ...string) *translate.Desired {
				w := newWorld(3, ipfamily.V4, ipfamily.V6)
				w.In.Config.Backend = backend
				w.ES("ns/s", "node2")
				w.Svc("ns/s", "172.18.0.100", "fc00:f853:ccd:e793::100")
				w.EPs("ns/s", eps...)
				w.Ready("node2", "ns/s")
				return Translate(w.In)
			}
			base := build("10.244.1.5@node1")
			for _, eps := range [][]string{
				{"10.244.1.5@node1", "10.244.3.5@node3"},
				{"10.244.3.5@node3", "fd00:10:244:1::5@node1"},
				{"10.244.1.9@node1", "10.244.2.9@node2", "fd00:10:244:3::7@node3"},
			} {
				d := build(eps...)
				if !slices.Equal(policyIDs(base), policyIDs(d)) {
					t.Errorf("endpoints %v changed policies:\n%v\nvs\n%v", eps, policyIDs(base), policyIDs(d))
				}
				_, _, nats, addrs := d.Count()
				if addrs-len(d.Rows[translate.ClusterKey].AddressSets[0].Addresses)-len(d.Rows[translate.ClusterKey].AddressSets[1].Addresses) != len(eps) {
					t.Errorf("endpoints %v: %d addresses in sets", eps, addrs)
				}
				if backend == translate.BackendOVN && nats != len(eps) {
					t.Errorf("endpoints %v: %d NAT rows", eps, nats)
				}
			}
		})
	}
}

// TestHostChange: moving a service to another host moves its endpoints
// between the hosts' sets; the new host gets them only once its agent reports.
func TestHostChange(t *testing.T) {
	w := newWorld(3)
	e := w.ES("ns/s", "node2")
	w.Svc("ns/s", "172.18.0.100")
	w.EPs("ns/s", "10.244.1.5@node1")
	w.Ready("node2", "ns/s")
	setOf := func(d *translate.Desired, node string) []string {
		r := d.Rows[translate.NodeKey(node)]
		if r == nil {
			return nil
		}
		return r.AddressSets[0].Addresses
	}
	d := Translate(w.In)
	if got := setOf(d, "node2"); !slices.Equal(got, []string{"10.244.1.5"}) {
		t.Fatalf("node2 set = %v", got)
	}
	e.Status.Host = "node3"
	d = Translate(w.In)
	if got := setOf(d, "node2"); got != nil {
		t.Errorf("node2 still has rows: %v", got)
	}
	if got := setOf(d, "node3"); len(got) != 0 {
		t.Errorf("node3 rerouted before its agent reported: %v", got)
	}
	w.Ready("node3", "ns/s")
	d = Translate(w.In)
	if got := setOf(d, "node3"); !slices.Equal(got, []string{"10.244.1.5"}) {
		t.Errorf("node3 set after report = %v", got)
	}
}

// TestReadinessHandshake: the report decides which endpoints enter the set.
func TestReadinessHandshake(t *testing.T) {
	setName := translate.AddressSetName(setID(translate.OwnerHost, "node2", ipfamily.V4))
	cases := []struct {
		name    string
		report  func(w *world)
		current []string
		want    []string
		reason  translate.Reason
	}{
		{"missing", func(w *world) {}, nil, nil, translate.ReasonAgentNotReady},
		{"matching", func(w *world) { w.Ready("node2", "ns/s") }, nil, []string{"10.244.1.5", "10.244.1.6"}, ""},
		{"stale endpoints keep what NB has", func(w *world) {
			w.EPs("ns/s", "10.244.1.5@node1")
			w.Ready("node2", "ns/s")
			w.EPs("ns/s", "10.244.1.5@node1", "10.244.1.6@node1")
		}, []string{"10.244.1.5"}, []string{"10.244.1.5"}, translate.ReasonAgentNotReady},
		{"stale endpoints drop removed ones", func(w *world) {
			w.EPs("ns/s", "10.244.1.5@node1", "10.244.1.7@node1")
			w.Ready("node2", "ns/s")
			w.EPs("ns/s", "10.244.1.5@node1", "10.244.1.6@node1")
		}, []string{"10.244.1.5", "10.244.1.7"}, []string{"10.244.1.5"}, translate.ReasonAgentNotReady},
		{"other ingress IP", func(w *world) {
			w.Ready("node2", "ns/s")
			w.In.Nodes["node2"].Report["ns/s"] = translate.ServiceReport{IngressIPs: []string{"172.18.0.99"}, Endpoints: w.In.Nodes["node2"].Report["ns/s"].Endpoints}
		}, nil, nil, translate.ReasonAgentNotReady},
		{"other network", func(w *world) {
			w.Ready("node2", "ns/s")
			r := w.In.Nodes["node2"].Report["ns/s"]
			r.Network = "7"
			w.In.Nodes["node2"].Report["ns/s"] = r
		}, nil, nil, translate.ReasonAgentNotReady},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(3)
			w.ES("ns/s", "node2")
			w.Svc("ns/s", "172.18.0.100")
			w.EPs("ns/s", "10.244.1.5@node1", "10.244.1.6@node1")
			c.report(w)
			w.In.Current[setName] = c.current
			d := Translate(w.In)
			got := d.Rows[translate.NodeKey("node2")].AddressSets[0].Addresses
			if !slices.Equal(got, c.want) {
				t.Errorf("set = %v, want %v", got, c.want)
			}
			if p := d.Problems.For("ns/s"); (c.reason == "") != (len(p) == 0) || (c.reason != "" && p[0].Reason != c.reason) {
				t.Errorf("problems = %v, want reason %q", p, c.reason)
			}
		})
	}
}

func TestAddressSetNameMatchesOVNKubernetes(t *testing.T) {
	// Values ovn-kubernetes hard-codes in its tests (reference §1.3).
	for id, want := range map[string]string{
		"default-network-controller:EgressService:egresssvc-served-pods:v4": "a13607449821398607916",
		"default-network-controller:EgressService:egresssvc-served-pods:v6": "a13607452020421864338",
	} {
		if got := translate.AddressSetName(id); got != want {
			t.Errorf("AddressSetName(%q) = %s, want %s", id, got, want)
		}
	}
}
