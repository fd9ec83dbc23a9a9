package conditions_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
)

// TestEgressIPConditions: an EgressIP is Ready when every IP is held; one
// unheld IP makes it not Ready with its assignment problem's reason.
func TestEgressIPConditions(t *testing.T) {
	eip := &egressipv1.EgressIP{Spec: egressipv1.EgressIPSpec{EgressIPs: []string{"172.18.1.10", "172.18.1.11"}}}
	both := []egressipv1.EgressIPStatusItem{{EgressIP: "172.18.1.10", Node: "node1"}, {EgressIP: "172.18.1.11", Node: "node2"}}
	cs := conditions.EgressIP(eip, both, nil, 4)
	want(t, cs, conditions.Ready, metav1.ConditionTrue, conditions.ReasonReady, "")
	want(t, cs, conditions.Assigned, metav1.ConditionTrue, conditions.ReasonAssigned, "172.18.1.10 on node1, 172.18.1.11 on node2")
	var ps translate.Problems
	ps.Add("blue", "NoMatchingNodeFound", "egress IP 172.18.1.10 is unassigned: no node can hold it")
	cs = conditions.EgressIP(eip, both[1:], ps, 4)
	want(t, cs, conditions.Assigned, metav1.ConditionFalse, "NoMatchingNodeFound", "1 of 2 egress IPs unassigned (172.18.1.10): egress IP 172.18.1.10 is unassigned")
	want(t, cs, conditions.Ready, metav1.ConditionFalse, "NoMatchingNodeFound", "Assigned: 1 of 2")
	want(t, conditions.EgressIP(eip, nil, nil, 4), conditions.Assigned, metav1.ConditionFalse, conditions.ReasonNotAssigned, "2 of 2")
}
