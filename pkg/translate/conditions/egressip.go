package conditions

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// The condition types of an EgressIP besides Ready.
const (
	// Assigned: every IP of spec.egressIPs is held by a node (status.items).
	Assigned = "Assigned"
)

// The reasons of an EgressIP's conditions besides its assignment
// problems' (NoMatchingNodeFound, EgressIPConflict, UnsupportedRequest,
// InvalidEgressIP).
const (
	ReasonAssigned    = "Assigned"
	ReasonNotAssigned = "NotAssigned"
)

// EgressIP returns the conditions of an EgressIP assigned items, with the
// problems of its assignment, in the order Ready, Assigned; gen is the
// generation they describe (observedGeneration).
func EgressIP(eip *egressipv1.EgressIP, items []egressipv1.EgressIPStatusItem, problems translate.Problems, gen int64) []metav1.Condition {
	held := map[string]string{}
	for _, it := range items {
		held[it.EgressIP] = it.Node
	}
	var missing, on []string
	for _, ip := range eip.Spec.EgressIPs {
		if n, ok := held[ip]; ok {
			on = append(on, ip+" on "+n)
		} else {
			missing = append(missing, ip)
		}
	}
	assigned := metav1.Condition{Type: Assigned, Status: metav1.ConditionTrue, Reason: ReasonAssigned, Message: "every egress IP is held: " + strings.Join(on, ", ")}
	if len(missing) > 0 {
		assigned.Status, assigned.Reason = metav1.ConditionFalse, ReasonNotAssigned
		assigned.Message = fmt.Sprintf("%d of %d egress IPs unassigned (%s)", len(missing), len(eip.Spec.EgressIPs), strings.Join(missing, ", "))
		if p, ok := firstProblem(problems); ok {
			assigned.Reason, assigned.Message = string(p.Reason), assigned.Message+": "+p.Message
		}
	}
	ready := metav1.Condition{Type: Ready, Status: metav1.ConditionTrue, Reason: ReasonReady, Message: "the selected pods leave with the egress IPs"}
	if assigned.Status != metav1.ConditionTrue {
		ready = metav1.Condition{Type: Ready, Status: metav1.ConditionFalse, Reason: assigned.Reason, Message: Assigned + ": " + assigned.Message}
	}
	out := []metav1.Condition{ready, assigned}
	for i := range out {
		out[i].ObservedGeneration = gen
	}
	return slices.Clip(out)
}
