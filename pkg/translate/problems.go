package translate

import "fmt"

// Reason is a machine-readable cause of a problem; it is the reason of the
// Kubernetes Event that reports it.
type Reason string

// Reasons reported for an EgressService.
const (
	ReasonNoHost                 Reason = "NoHost"
	ReasonUnknownHost            Reason = "UnknownHost"
	ReasonServiceNotFound        Reason = "ServiceNotFound"
	ReasonServiceNotLoadBalancer Reason = "ServiceNotLoadBalancer"
	ReasonNoIngressIP            Reason = "NoIngressIP"
	ReasonMultipleIngressIPs     Reason = "MultipleIngressIPs"
	ReasonNoEndpoints            Reason = "NoEndpoints"
	ReasonFamilyWithoutIngressIP Reason = "FamilyWithoutIngressIP"
	ReasonSharedEndpoint         Reason = "SharedEndpoint"
	ReasonAgentNotReady          Reason = "AgentNotReady"
	ReasonNodeAnnotationMissing  Reason = "NodeAnnotationMissing"
	// ReasonNodeAnnotationInvalid: an ovn-kubernetes annotation of a Node
	// cannot be read (NodeInfo.Problems); what it says is not used.
	ReasonNodeAnnotationInvalid Reason = "NodeAnnotationInvalid"
	ReasonGatewayNotFound       Reason = "GatewayNotFound"
	ReasonNATAddressesNotRouter Reason = "NATAddressesNotRouter"
	ReasonInvalidNodeSelector   Reason = "InvalidNodeSelector"
	ReasonNoEligibleNode        Reason = "NoEligibleNode"
	ReasonInvalidNetwork        Reason = "InvalidNetwork"
	ReasonUnassignedTrafficDrop Reason = "UnassignedTrafficDropped"
	ReasonTransitAddressMissing Reason = "TransitAddressMissing"
	// ReasonEndpointOutsideClusterSubnets: a pod address outside every
	// --cluster-subnets prefix (a dual-stack cluster's IPv6 network missing
	// from the flag, typically): never skipped silently.
	ReasonEndpointOutsideClusterSubnets Reason = "EndpointOutsideClusterSubnets"
	// ReasonHostMoveDamped: a selector change that would move the host
	// again soon after the last one is held back (SelectInput.Damped).
	ReasonHostMoveDamped Reason = "HostMoveDamped"
	// ReasonEndpointsMirrored: the Service's EndpointSlices are mirrored
	// from an Endpoints object, whose addresses anyone who may edit
	// Endpoints in the namespace chooses: they are not used.
	ReasonEndpointsMirrored Reason = "EndpointsMirrored"
)

// Problem is something about one EgressService (or one node) a user may
// have to act on. Problems never stop the translation of other services.
type Problem struct {
	// Key is "namespace/name" of the EgressService, or "node/<name>".
	Key     string `json:"key"`
	Reason  Reason `json:"reason"`
	Message string `json:"message"`
}

func (p Problem) String() string { return fmt.Sprintf("%s: %s: %s", p.Key, p.Reason, p.Message) }

// Problems collects problems in the order they were found.
type Problems []Problem

func (ps *Problems) Add(key string, r Reason, format string, args ...any) {
	*ps = append(*ps, Problem{Key: key, Reason: r, Message: fmt.Sprintf(format, args...)})
}

// For returns the problems of one key.
func (ps Problems) For(key string) Problems {
	var out Problems
	for _, p := range ps {
		if p.Key == key {
			out = append(out, p)
		}
	}
	return out
}
