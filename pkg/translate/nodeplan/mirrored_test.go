package nodeplan

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestNodePlanMirroredEndpointsNotUsed: the agent on the host of a service
// whose EndpointSlice is mirrored from an Endpoints object SNATs nothing
// (the rows and the host selection: TestMirroredEndpointsNotUsed).
func TestNodePlanMirroredEndpointsNotUsed(t *testing.T) {
	mirror := func(ss []*discoveryv1.EndpointSlice) {
		for _, s := range ss {
			s.Labels[discoveryv1.LabelManagedBy] = translate.MirroringManager
		}
	}
	in := planInput([]*egressv1.EgressService{planES("thief", "web", planNode, "", "")},
		[]*corev1.Service{planSvc("thief", "web", []string{"10.96.0.10"}, []string{"5.5.5.5"})},
		[]*discoveryv1.EndpointSlice{planSlice("thief", "web", npV4, "10.128.1.4@node1")}, nil)
	mirror(in.EndpointSlices)
	if got := NodePlan(in).Desired.SNAT; len(got) != 0 {
		t.Errorf("SNAT for a mirrored slice: %v", npStrs(got))
	}
}
