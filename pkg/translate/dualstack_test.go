package translate

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TestDualStackEndpointOutsideClusterSubnets: on a dual-stack cluster whose
// --cluster-subnets names only the IPv4 network (the default), an IPv6 pod
// endpoint inside its node's IPv6 pod subnet is never dropped silently: it is
// a problem naming the address and the flag. With both networks given it
// gets its rows and no problem; a host-networked endpoint (a node address)
// is skipped without a problem, as before.
func TestDualStackEndpointOutsideClusterSubnets(t *testing.T) {
	w := newWorld(3, ipfamily.V4, ipfamily.V6)
	w.in.Config.AssumeAgentsReady = true
	w.es("ns/web", "node2")
	w.svc("ns/web", "172.18.0.100", "fc00:f853:ccd:e793::100")
	w.eps("ns/web", "10.244.1.5@node1", "fd00:10:244:1::5@node1", "172.18.0.4@node3")
	v6 := AddressSetName(setID(OwnerHost, "node2", ipfamily.V6))

	w.in.Config.ClusterSubnets = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	d := Translate(w.in)
	var got []string
	for _, p := range d.Problems.For("ns/web") {
		if p.Reason == ReasonEndpointOutsideClusterSubnets {
			got = append(got, p.Message)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "fd00:10:244:1::5") || !strings.Contains(got[0], "--cluster-subnets") ||
		!strings.Contains(got[0], "fd00:10:244:1::/64") || !strings.Contains(got[0], "IPv6") {
		t.Errorf("problems %q; want one naming fd00:10:244:1::5, its subnet and --cluster-subnets", got)
	}

	w.in.Config.ClusterSubnets = append(w.in.Config.ClusterSubnets, netip.MustParsePrefix("fd00:10:244::/48"))
	d = Translate(w.in)
	for _, p := range d.Problems {
		if p.Reason == ReasonEndpointOutsideClusterSubnets {
			t.Errorf("with both cluster networks: %s", p)
		}
	}
	found := false
	for _, as := range d.Rows[NodeKey("node2")].AddressSets {
		found = found || (as.Name == v6 && len(as.Addresses) == 1 && as.Addresses[0] == "fd00:10:244:1::5")
	}
	if !found {
		t.Errorf("with both cluster networks the IPv6 endpoint is not in node2's IPv6 set: %+v", d.Rows[NodeKey("node2")].AddressSets)
	}
}

// TestNodePlanEndpointOutsideClusterSubnets: the node agent says the same
// for the endpoints in its own node's pod subnets.
func TestNodePlanEndpointOutsideClusterSubnets(t *testing.T) {
	in := planInput(
		[]*egressv1.EgressService{planES("ns", "web", planNode, "", "")},
		[]*corev1.Service{planSvc("ns", "web", []string{"10.96.0.10", "fd00:96::10"}, []string{"5.5.5.5", "5:5::5"})},
		[]*discoveryv1.EndpointSlice{
			planSlice("ns", "web", npV4, "10.128.1.4@"+planNode),
			planSlice("ns", "web", npV6, "fe00:10:128:1::4@"+planNode, "fe00:10:129::9@node9"),
		}, nil)
	in.ClusterSubnets = []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")}
	in.NodeSubnets = []netip.Prefix{netip.MustParsePrefix("10.128.1.0/24"), netip.MustParsePrefix("fe00:10:128:1::/64")}
	out := NodePlan(in)
	var got []string
	for _, p := range out.Problems {
		if p.Reason == ReasonEndpointOutsideClusterSubnets {
			got = append(got, p.Message)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "fe00:10:128:1::4") || !strings.Contains(got[0], "--cluster-subnets") {
		t.Errorf("problems %q; want one for fe00:10:128:1::4 (the other IPv6 endpoint is not in this node's subnets)", got)
	}
}
