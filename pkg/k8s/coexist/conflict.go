// Package coexist keeps ovn-egress from fighting ovn-kubernetes, with the
// evidence the real binaries leave (reference: ovn-kubernetes-live-2):
//
//   - its egress-service feature is on (or its rows are left behind): its
//     reroute policies (external_ids EgressSVC) at the reroute priority, or
//     a non-empty egresssvc-served-pods address set, in an NB — the NB of a
//     central master or of an interconnect zone, whose node agent reports
//     it in its readiness report so that the ic master (which has no NB)
//     knows too. Its repair loop deletes ovn-egress's reroutes and rewrites
//     status.host, equal-priority policies race: every controller writes
//     nothing until it is gone;
//   - its EgressIP feature serves pods: its priority-100 EgressIP reroutes,
//     its EgressIP SNATs, or a non-empty egressip-served-pods set (its
//     no-reroute 102 policies alone are not evidence: its egress-service
//     feature writes them too and leaves them behind). ovn-egress's
//     EgressIP assignment and rows stand back;
//   - a central master pointed at an interconnect zone's NB;
//   - another install of ovn-egress that claimed the NB first (its instance
//     in NB_Global's external_ids): its rows are indistinguishable from
//     this install's, and each would delete the other's;
//   - status.host of one EgressService written by a field manager that is
//     not ovn-egress's (nor an operator's kubectl): real ovnkube's manager is
//     its host's name, so no name can recognise it. That service alone is
//     held — its status and node label left as written — for a while, long
//     enough for ovn-kubernetes' rows to show if its feature is on; `ovn-egress
//     migrate --apply` ends a hold at once.
//
// The end of a standoff is debounced: ovn-kubernetes' rows vanish for a
// moment while it moves a host, which must not read as "gone".
package coexist

import (
	"fmt"
	"strings"

	"github.com/ovn-egress/ovn-egress/pkg/ovn"
)

// Remedy is what an operator does about ovn-kubernetes' own feature.
const Remedy = "run ovnkube-controller and ovnkube-cluster-manager with --enable-egress-service=false, " +
	"then remove its leftovers with `ovn-egress migrate --apply` (docs/migration.md)"

// EgressIPRemedy is what an operator does about ovn-kubernetes' EgressIP.
const EgressIPRemedy = "run ovnkube-controller and ovnkube-cluster-manager with --enable-egress-ip=false, " +
	"then remove its leftovers with `ovn-egress migrate --apply` (docs/migration.md)"

// Conflict is what was found. The zero value is no conflict.
type Conflict struct {
	// EgressSVCPolicies counts ovn-kubernetes' own reroute policies (an
	// EgressSVC external id) at the reroute priority in this NB.
	EgressSVCPolicies int
	// ServedPods counts the addresses in its egresssvc-served-pods sets.
	ServedPods int
	// InterconnectNB: a central master's NB is an interconnect zone's (it
	// has a transit switch): the master must run with --mode=ic.
	InterconnectNB bool
	// Zones are the interconnect zones whose node agents report
	// ovn-kubernetes' egress-service rows in their NB (an ic master's view).
	Zones []string
	// Services are the EgressServices the finding names (EgressSVC values),
	// sorted: where the Events go.
	Services []string

	// EgressIPRows counts ovn-kubernetes' EgressIP rows that serve pods in
	// this NB (reroutes, SNATs, served-pods addresses).
	EgressIPRows int
	// EgressIPZones are the zones whose agents report such rows.
	EgressIPZones []string

	// ForeignInstance is the other ovn-egress install that claimed this NB
	// (ovn.InstanceKey): this one writes nothing into it.
	ForeignInstance string
	// Unclaimed is why this install's claim on the NB failed (the NB down,
	// a lost race to create NB_Global): nothing is written until a claim
	// succeeds, tried again every second. It names no other install, so
	// zones do not publish it and node agents do not stand back for it.
	Unclaimed string

	// Waiting: the zones' verdicts are not read yet (the report informer has
	// not synced): an interconnect master writes nothing until it knows.
	Waiting bool

	// Held are the EgressServices whose status.host a foreign field manager
	// wrote, within the hold: ovn-egress leaves their status and label alone.
	// A hold costs that service alone; it is not a standoff.
	Held []string
}

// Active reports whether the EgressService controllers must write nothing.
func (c Conflict) Active() bool {
	return c.EgressSVCPolicies > 0 || c.ServedPods > 0 || c.InterconnectNB || len(c.Zones) > 0 || c.ForeignInstance != "" || c.Unclaimed != "" || c.Waiting
}

// EgressIPActive reports whether the EgressIP controllers must write
// nothing: ovn-kubernetes' own EgressIP serves pods, or the NB is a zone's
// under a central master.
func (c Conflict) EgressIPActive() bool {
	return c.EgressIPRows > 0 || len(c.EgressIPZones) > 0 || c.InterconnectNB || c.ForeignInstance != "" || c.Unclaimed != "" || c.Waiting
}

// String says what stops the EgressService controllers and what to do.
func (c Conflict) String() string {
	if !c.Active() {
		return "no conflict"
	}
	var found, do []string
	if c.EgressSVCPolicies > 0 {
		found = append(found, fmt.Sprintf("%d ovn-kubernetes EgressSVC reroute policies", c.EgressSVCPolicies))
	}
	if c.ServedPods > 0 {
		found = append(found, fmt.Sprintf("%d addresses in its egresssvc-served-pods address sets", c.ServedPods))
	}
	if n := len(c.Zones); n > 0 {
		found = append(found, fmt.Sprintf("ovn-kubernetes' egress-service rows (or another ovn-egress install's claim) in the NB of %d zone(s) (%s): "+
			"their node agents' reports say which", n, short(c.Zones)))
	}
	if c.EgressSVCPolicies > 0 || c.ServedPods > 0 || len(c.Zones) > 0 {
		do = append(do, "ovn-kubernetes' own egress-service feature is active, or its rows are left behind: "+Remedy)
	}
	if c.InterconnectNB {
		found = append(found, "a transit switch in the NB (an interconnect zone's NB)")
		do = append(do, "this NB belongs to one interconnect zone: run the master with --mode=ic (or auto) and each node agent with --zone")
	}
	found, do = c.foreignInstance(found, do)
	if len(found) == 0 && c.Waiting {
		return waiting
	}
	return "found " + strings.Join(found, ", ") + "; ovn-egress writes nothing until this is gone: " + strings.Join(do, "; ")
}

// EgressIPString says what stops the EgressIP controllers and what to do.
func (c Conflict) EgressIPString() string {
	if !c.EgressIPActive() {
		return "no conflict"
	}
	var found, do []string
	if c.EgressIPRows > 0 {
		found = append(found, fmt.Sprintf("%d rows of ovn-kubernetes' own EgressIP that serve pods (its reroutes, SNATs or egressip-served-pods addresses)", c.EgressIPRows))
	}
	if n := len(c.EgressIPZones); n > 0 {
		found = append(found, fmt.Sprintf("ovn-kubernetes' EgressIP rows (or another ovn-egress install's claim) in the NB of %d zone(s) (%s): "+
			"their node agents' reports say which", n, short(c.EgressIPZones)))
	}
	if c.EgressIPRows > 0 || len(c.EgressIPZones) > 0 {
		do = append(do, "ovn-kubernetes' own EgressIP feature is active: "+EgressIPRemedy)
	}
	if c.InterconnectNB {
		found = append(found, "a transit switch in the NB (an interconnect zone's NB)")
		do = append(do, "run the master with --mode=ic (or auto) and each node agent with --zone")
	}
	found, do = c.foreignInstance(found, do)
	if len(found) == 0 && c.Waiting {
		return waiting
	}
	return "found " + strings.Join(found, ", ") + "; ovn-egress writes no EgressIP status or rows until this is gone " +
		"(a zone withdraws the EgressIP rows it wrote): " + strings.Join(do, "; ")
}

const waiting = "waiting for the node agents' reports (the zones' verdicts on ovn-kubernetes' rows): nothing is written until they are read"

// short lists at most three names.
func short(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
}

// Reason is the Event reason on the objects a conflict names.
const Reason = "OVNKubernetesConflict"

// ReasonHeld is the Event reason on an EgressService whose status.host a
// foreign field manager wrote.
const ReasonHeld = "StatusWrittenByOther"

// foreignInstance adds the other install's claim, or this one's failed
// claim, and the way out.
func (c Conflict) foreignInstance(found, do []string) ([]string, []string) {
	if c.Unclaimed != "" {
		found = append(found, "no claim of this NB for this install yet ("+c.Unclaimed+")")
		do = append(do, "the claim is tried again every second; if this lasts, check the NB's connection (docs/operations.md#uninstalling)")
	}
	if c.ForeignInstance == "" {
		return found, do
	}
	return append(found, fmt.Sprintf("this NB claimed by another ovn-egress install, %q (NB_Global external_ids:%s)", c.ForeignInstance, ovn.InstanceKey)),
		append(do, fmt.Sprintf("run one install per NB; once %q is uninstalled, release its claim: "+
			"ovn-nbctl remove NB_Global . external_ids %s (docs/operations.md#uninstalling)", c.ForeignInstance, ovn.InstanceKey))
}
