package nodeplan

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

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
		if p.Reason == translate.ReasonEndpointOutsideClusterSubnets {
			got = append(got, p.Message)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "fe00:10:128:1::4") || !strings.Contains(got[0], "--cluster-subnets") {
		t.Errorf("problems %q; want one for fe00:10:128:1::4 (the other IPv6 endpoint is not in this node's subnets)", got)
	}
}
