// Package coexist keeps ovn-egress from fighting ovn-kubernetes. When
// ovn-kubernetes' own egress-service feature is active — its reroute policies
// (external_ids EgressSVC) at the reroute priority, a non-empty
// egresssvc-served-pods address set, or its cluster-manager writing
// status.host — its repair loop deletes ovn-egress's reroutes and rewrites
// status.host, and equal-priority policies race. And a central master pointed
// at an interconnect zone's NB writes reroutes northd cannot use. In both
// cases the right move is to write nothing, say exactly what was found and
// what to do, and resume by itself once it is gone: the Detector tells the
// controllers when.
package coexist

import (
	"fmt"
	"strings"
)

// Remedy is what an operator does about ovn-kubernetes' own feature.
const Remedy = "run ovnkube-controller and ovnkube-cluster-manager with --enable-egress-service=false, " +
	"then remove its leftovers with `ovn-egress migrate --apply` (docs/migration.md)"

// Manager is the field-manager prefix of ovn-kubernetes' binaries (ovnkube):
// the manager of an EgressService status it wrote.
const Manager = "ovnkube"

// Conflict is what was found. The zero value is no conflict.
type Conflict struct {
	// EgressSVCPolicies counts ovn-kubernetes' own reroute policies (an
	// EgressSVC external id) at the reroute priority.
	EgressSVCPolicies int
	// ServedPods counts the addresses in its egresssvc-served-pods sets.
	ServedPods int
	// StatusWriters are the EgressServices ("namespace/name") whose
	// status.host an ovn-kubernetes manager wrote last.
	StatusWriters []string
	// InterconnectNB: a central master's NB is an interconnect zone's (it
	// has a transit switch): the master must run with --mode=ic.
	InterconnectNB bool
	// Services are the EgressServices the finding names (EgressSVC values
	// and StatusWriters), sorted: where the Events go.
	Services []string
}

// Active reports whether ovn-egress must stand back.
func (c Conflict) Active() bool {
	return c.EgressSVCPolicies > 0 || c.ServedPods > 0 || len(c.StatusWriters) > 0 || c.InterconnectNB
}

// String says what was found and what to do.
func (c Conflict) String() string {
	if !c.Active() {
		return "no conflict"
	}
	var found []string
	if c.EgressSVCPolicies > 0 {
		found = append(found, fmt.Sprintf("%d ovn-kubernetes EgressSVC reroute policies", c.EgressSVCPolicies))
	}
	if c.ServedPods > 0 {
		found = append(found, fmt.Sprintf("%d addresses in its egresssvc-served-pods address sets", c.ServedPods))
	}
	if n := len(c.StatusWriters); n > 0 {
		found = append(found, fmt.Sprintf("status.host of %d EgressService(s) written by %s (%s)", n, Manager, short(c.StatusWriters)))
	}
	var do []string
	if c.EgressSVCPolicies > 0 || c.ServedPods > 0 || len(c.StatusWriters) > 0 {
		do = append(do, "ovn-kubernetes' own egress-service feature is active: "+Remedy)
	}
	if c.InterconnectNB {
		found = append(found, "a transit switch in the NB (an interconnect zone's NB)")
		do = append(do, "this NB belongs to one interconnect zone: run the master with --mode=ic (or auto) and each node agent with --zone")
	}
	return "found " + strings.Join(found, ", ") + "; ovn-egress writes nothing until this is gone: " + strings.Join(do, "; ")
}

// short lists at most three names.
func short(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
}

// Reason is the Event reason on the EgressServices a conflict names.
const Reason = "OVNKubernetesConflict"
