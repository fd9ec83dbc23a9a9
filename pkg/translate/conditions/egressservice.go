// Package conditions computes the status conditions of the objects
// ovn-egress serves from what the cluster shows of them: pure functions of
// their arguments, as the rest of translate. The conditions controller
// (package k8s/conditions) gathers the arguments and writes the result.
package conditions

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
)

// The condition types of an EgressService.
const (
	// Ready: the service's traffic leaves as asked — a host is chosen, the
	// agents that carry it report it programmed, and nothing shows the
	// load-balancer IP announced from another node.
	Ready = "Ready"
	// HostAssigned: status.host names a node (or ALL for sourceIPBy
	// Network); when False its reason is host selection's.
	HostAssigned = "HostAssigned"
	// AgentsReady: the node agent of the host (of every node with an
	// endpoint, for ALL) reports the service programmed as the master
	// expects it: SNAT addresses, network and endpoints.
	AgentsReady = "AgentsReady"
	// Announced: who announces the load-balancer IP, by MetalLB's
	// ServiceL2Status: the host (True), another node (False), or not known
	// (Unknown: no layer-2 status, as with BGP or another load balancer).
	Announced = "Announced"
)

// The reasons these conditions give besides the translate.Reason of a
// problem (host selection's, for HostAssigned False).
const (
	ReasonReady              = "Ready"
	ReasonHostAssigned       = "HostAssigned"
	ReasonAllNodes           = "AllNodes"
	ReasonAgentsReady        = "AgentsReady"
	ReasonAgentNotReady      = string(translate.ReasonAgentNotReady)
	ReasonNoHost             = string(translate.ReasonNoHost)
	ReasonAnnouncedFromHost  = "AnnouncedFromHost"
	ReasonAnnouncedElsewhere = "AnnouncedFromOtherNode"
	ReasonNotAnnounced       = "NoLayer2Announcement"
	ReasonAnnouncerUnknown   = "AnnouncerUnknown"
	ReasonNotRequired        = "NotRequired"
	// ReasonStandingBack: ovn-kubernetes' own egress-service feature is
	// active, and ovn-egress writes nothing until it is gone (the Events'
	// reason of the same name).
	ReasonStandingBack = "OVNKubernetesConflict"
)

// EgressServiceInput is what the conditions of one EgressService are
// computed from.
type EgressServiceInput struct {
	EgressService *egressv1.EgressService
	// HostProblems are host selection's problems of the service: why it
	// has no host, when it has none.
	HostProblems translate.Problems
	// Service and EndpointSlices are the Service of the same name (nil
	// when there is none) and its slices.
	Service        *corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	ClusterSubnets []netip.Prefix
	// Reports are the node agents' reports of the nodes that carry the
	// traffic (the host; for ALL every node with an endpoint); a node
	// without one is absent.
	Reports map[string]translate.Report
	// Layer2 says whether MetalLB's ServiceL2Status is served, and
	// Announcers the nodes whose ServiceL2Status names the Service.
	Layer2     bool
	Announcers []string
	// Standoff, when not empty, says why ovn-egress writes nothing now
	// (ovn-kubernetes' own feature is active): Ready is False for it.
	Standoff string
}

// CarryingNodes are the nodes whose agents carry an EgressService's
// traffic, so whose reports its conditions read: the host, or for ALL every
// node with a cluster-networked endpoint.
func CarryingNodes(es *egressv1.EgressService, svc *corev1.Service, eps []*discoveryv1.EndpointSlice, clusterSubnets []netip.Prefix) []string {
	if es.Status.Host != egressv1.HostAll {
		return carryingNodes(es, nil)
	}
	return carryingNodes(es, translate.ServiceEndpoints(svc, eps, clusterSubnets))
}

// carryingNodes is CarryingNodes of the Service's endpoints eps.
func carryingNodes(es *egressv1.EgressService, eps []translate.Endpoint) []string {
	switch h := es.Status.Host; h {
	case "":
		return nil
	case egressv1.HostAll:
		var out []string
		for _, e := range eps {
			out = append(out, e.Node)
		}
		slices.Sort(out)
		return slices.Compact(out)
	default:
		return []string{h}
	}
}

// EgressService returns the service's conditions, each with the object's
// generation as observedGeneration, in the order Ready, HostAssigned,
// AgentsReady, Announced.
func EgressService(in EgressServiceInput) []metav1.Condition {
	es := in.EgressService
	host := hostAssigned(in)
	agents := agentsReady(in, host.Status == metav1.ConditionTrue)
	announced := announced(in, host.Status == metav1.ConditionTrue)
	ready := metav1.Condition{Type: Ready, Status: metav1.ConditionTrue, Reason: ReasonReady, Message: "egress traffic leaves as asked"}
	for _, c := range []metav1.Condition{host, agents, announced} {
		if c.Status == metav1.ConditionTrue || (c.Type == Announced && c.Status == metav1.ConditionUnknown) {
			continue
		}
		ready = metav1.Condition{Type: Ready, Status: metav1.ConditionFalse, Reason: c.Reason, Message: c.Type + ": " + c.Message}
		break
	}
	if in.Standoff != "" {
		ready = metav1.Condition{Type: Ready, Status: metav1.ConditionFalse, Reason: ReasonStandingBack, Message: "ovn-egress stands back and writes nothing: " + in.Standoff}
	}
	out := []metav1.Condition{ready, host, agents, announced}
	for i := range out {
		out[i].ObservedGeneration = es.Generation
	}
	return out
}

func hostAssigned(in EgressServiceInput) metav1.Condition {
	c := metav1.Condition{Type: HostAssigned}
	switch h := in.EgressService.Status.Host; h {
	case "":
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonNoHost, "no host is assigned"
		if p, ok := firstProblem(in.HostProblems); ok {
			c.Reason, c.Message = string(p.Reason), p.Message
		}
	case egressv1.HostAll:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAllNodes, "sourceIPBy Network: each node handles the traffic of its own endpoints"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonHostAssigned, "host is "+h
	}
	return c
}

// firstProblem is the problem a user acts on first: the first by reason,
// then message (problems come in no promised order).
func firstProblem(ps translate.Problems) (translate.Problem, bool) {
	if len(ps) == 0 {
		return translate.Problem{}, false
	}
	return slices.MinFunc(ps, func(a, b translate.Problem) int {
		return strings.Compare(string(a.Reason)+"\x00"+a.Message, string(b.Reason)+"\x00"+b.Message)
	}), true
}

func agentsReady(in EgressServiceInput, hosted bool) metav1.Condition {
	c := metav1.Condition{Type: AgentsReady}
	if !hosted {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonNoHost, "no host is assigned"
		return c
	}
	es := in.EgressService
	eps := translate.ServiceEndpoints(in.Service, in.EndpointSlices, in.ClusterSubnets)
	var ingress map[ipfamily.Family]netip.Addr
	if es.Status.Host != egressv1.HostAll && in.Service != nil {
		ingress, _ = translate.IngressIPs(in.Service)
	}
	nodes := carryingNodes(es, eps)
	if len(nodes) == 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAgentsReady, "no node has an endpoint of the service"
		return c
	}
	key := translate.EgressServiceKey(es)
	var notReported, behind []string
	for _, n := range nodes {
		got, ok := in.Reports[n][key]
		switch {
		case !ok:
			notReported = append(notReported, n)
		case !reportMatches(got, es, n, eps, ingress):
			behind = append(behind, n)
		}
	}
	switch {
	case len(notReported) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonAgentNotReady
		c.Message = fmt.Sprintf("the node agent on %s has not reported this service programmed", nameList(notReported))
	case len(behind) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonAgentNotReady
		c.Message = fmt.Sprintf("the node agent on %s has not caught up with this service's Service or endpoints", nameList(behind))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonAgentsReady
		c.Message = fmt.Sprintf("the node agent on %s reports the service programmed", nameList(nodes))
	}
	return c
}

// reportMatches compares an agent's report entry with what the master
// expects of node (translate.ReportAnnotation: the SNAT addresses, the
// network, the endpoints' hash, as the node plan computes them) for the
// Service's endpoints eps and SNAT addresses ingress.
func reportMatches(got translate.ServiceReport, es *egressv1.EgressService, node string, eps []translate.Endpoint, ingress map[ipfamily.Family]netip.Addr) bool {
	want := translate.EndpointsHash(translate.AgentEndpoints(es.Status.Host, node, eps, ingress))
	return got.Network == es.Spec.Network && slices.Equal(got.IngressIPs, translate.ReportIPs(ingress)) && got.Endpoints == want
}

// nameList names at most three nodes, then how many more.
func nameList(nodes []string) string {
	if len(nodes) <= 3 {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nodes[:3], ", "), len(nodes)-3)
}

func announced(in EgressServiceInput, hosted bool) metav1.Condition {
	c := metav1.Condition{Type: Announced}
	host := in.EgressService.Status.Host
	switch {
	case host == egressv1.HostAll || in.EgressService.Spec.SourceIPBy == egressv1.Network:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonNotRequired, "sourceIPBy Network: the traffic does not leave with the load-balancer IP"
	case !hosted:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonNoHost, "no host is assigned"
	case !in.Layer2:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonAnnouncerUnknown, "no layer-2 announcement status in the cluster (MetalLB's ServiceL2Status): who announces the load-balancer IP is not known"
	case len(in.Announcers) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonNotAnnounced, "no node announces the load-balancer IP in layer 2 (MetalLB's ServiceL2Status; BGP announcements are not read)"
	case slices.Contains(in.Announcers, host) && len(in.Announcers) == 1:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAnnouncedFromHost, "MetalLB announces the load-balancer IP from the host, "+host
	default:
		others := slices.DeleteFunc(slices.Clone(in.Announcers), func(n string) bool { return n == host })
		c.Status, c.Reason = metav1.ConditionFalse, ReasonAnnouncedElsewhere
		c.Message = fmt.Sprintf("MetalLB announces the load-balancer IP from %s, not from the host %s: replies to the egress traffic arrive at a node that did not send it; "+
			"select the host's label %s in the L2Advertisement's nodeSelectors", nameList(others), host, hosts.NodeLabel(in.EgressService.Namespace, in.EgressService.Name))
	}
	return c
}

// Set puts computed into conds the way meta.SetStatusCondition does (a
// condition's lastTransitionTime changes only with its status; conditions
// of other types stay) and reports whether anything changed.
func Set(conds *[]metav1.Condition, computed []metav1.Condition, now metav1.Time) bool {
	changed := false
	for _, c := range computed {
		c.LastTransitionTime = now
		if meta.SetStatusCondition(conds, c) {
			changed = true
		}
	}
	return changed
}
