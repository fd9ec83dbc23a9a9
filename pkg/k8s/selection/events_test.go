package selection

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// A service refused for its ingress IP or its host label is counted under that reason in
// ovn_egress_egressservices{state="unassigned"} (not "Pending"), and,
// under --unassigned-traffic=drop, its Event says its traffic is dropped.
func TestUnhostedReasonOfRefusedServices(t *testing.T) {
	for _, r := range []translate.Reason{translate.ReasonInvalidIngressIP, translate.ReasonIngressIPShared, hosts.ReasonNodeLabelCollision} {
		e := newEvents(nil, true, nil)
		e.current["ns/web"] = translate.Problems{{Key: "ns/web", Reason: r}}
		if got := e.unhostedReason("ns/web"); got != string(r) {
			t.Errorf("unhosted reason with only %s: %q", r, got)
		}
		if !leavesEndpointsUnhosted(r) {
			t.Errorf("%s does not count as leaving endpoints unhosted", r)
		}
	}
	// The order holds: a missing Service is reported before its IP.
	e := newEvents(nil, true, nil)
	e.current["ns/web"] = translate.Problems{{Key: "ns/web", Reason: translate.ReasonIngressIPShared}, {Key: "ns/web", Reason: translate.ReasonServiceNotFound}}
	if got := e.unhostedReason("ns/web"); got != string(translate.ReasonServiceNotFound) {
		t.Errorf("unhosted reason: %q, want ServiceNotFound first", got)
	}
}
