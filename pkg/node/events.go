package node

import "github.com/ovn-egress/ovn-egress/pkg/translate"

// Event reasons the agent reports on EgressServices, beyond the plan's
// translate reasons (NetworkNotFound, InvalidNetwork, SharedEndpoint).
const (
	// ReasonNetworkWithoutRoutes: the network's table has no route of a
	// family the agent points rules at; that traffic falls through to the
	// next rules (usually the main table).
	ReasonNetworkWithoutRoutes translate.Reason = "NetworkWithoutRoutes"
)

// EventSource is the component name on the agent's Events.
const EventSource = "ovn-egress-node"
