package nodeplan

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

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
		nets := translate.IngressNetworks{ClusterSubnets: in.ClusterSubnets}
		for _, e := range a.Desired.SNAT {
			if seen[e.Endpoint] {
				t.Fatalf("endpoint %s SNATed twice:\n%s", e.Endpoint, renderNodePlan(a))
			}
			seen[e.Endpoint] = true
			if ipfamily.Of(e.Endpoint) != e.Family || ipfamily.Of(e.SNATIP) != e.Family {
				t.Fatalf("element %s mixes families", e)
			}
			if !translate.InAny(e.Endpoint, in.ClusterSubnets) {
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
