package nodeplan

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestNodePlanRefusesIngressIPs: the agent never SNATs a hosted service's
// pods to a node's own address or to one inside the cluster subnets,
// whoever wrote status.host; the others on the node are programmed.
func TestNodePlanRefusesIngressIPs(t *testing.T) {
	for ingress, message := range map[string]string{"172.18.0.3": "is a node's own address", "10.128.0.9": "is inside the cluster subnet 10.128.0.0/16"} {
		in := planInput(
			[]*egressv1.EgressService{planES("ns", "bad", planNode, "", ""), planES("ns", "good", planNode, "", "")},
			[]*corev1.Service{planSvc("ns", "bad", []string{"10.96.0.10"}, []string{ingress}), planSvc("ns", "good", []string{"10.96.0.11"}, []string{"5.5.5.5"})},
			[]*discoveryv1.EndpointSlice{planSlice("ns", "bad", npV4, "10.128.1.4@node1"), planSlice("ns", "good", npV4, "10.128.1.5@node1")}, nil)
		in.NodeIPs = []netip.Addr{netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("172.18.0.3")}
		out := NodePlan(in)
		if got := npStrs(out.Desired.SNAT); !slices.Equal(got, []string{"v4 10.128.1.5 : 5.5.5.5  # ns/good"}) {
			t.Errorf("ingress %s: SNAT %q; want the good service's only", ingress, got)
		}
		ps := out.Problems.For("ns/bad")
		if len(ps) != 1 || ps[0].Reason != translate.ReasonInvalidIngressIP || !strings.Contains(ps[0].Message, message) {
			t.Errorf("ingress %s: problems %v; want InvalidIngressIP saying %q", ingress, ps, message)
		}
		if _, ok := out.Report()["ns/bad"]; ok {
			t.Errorf("ingress %s: ns/bad is reported ready", ingress)
		}
	}
}
