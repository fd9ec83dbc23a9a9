package translate

import (
	"net/netip"
	"slices"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The readiness handshake: which endpoints of a service may be rerouted to a
// node, by the node agent's report of what it programmed.

// admission says which endpoints of a service may be rerouted to a node now.
type admission struct {
	all     bool                // every endpoint (the agent caught up)
	current map[netip.Addr]bool // otherwise only these (already in NB)
}

func (a admission) admits(ip netip.Addr) bool { return a.all || a.current[ip] }

// eligible decides which endpoints may be rerouted to node n now, by the
// readiness handshake: all of them when n's agent reported this service with
// the expected SNAT addresses, network and endpoints; when the report is
// behind, only those already in n's sets of this owner type; none without a
// report.
func (t *translator) eligible(s *service, n *NodeInfo, owner string) admission {
	if t.in.Config.AssumeAgentsReady {
		return admission{all: true}
	}
	r, ok := n.Report[s.key]
	if !ok {
		t.problem(s.key, ReasonAgentNotReady, "the node agent on %s has not reported this service programmed yet", n.Name)
		return admission{}
	}
	want := EndpointsHash(AgentEndpoints(s.es.Status.Host, n.Name, s.allEps, s.ingress))
	if r.Network == s.es.Spec.Network && slices.Equal(r.IngressIPs, ReportIPs(s.ingress)) && r.Endpoints == want {
		return admission{all: true}
	}
	t.problem(s.key, ReasonAgentNotReady, "the node agent on %s has not caught up with this service yet; new endpoints wait", n.Name)
	s.memoizable = false // it depends on NB's members now
	return admission{current: t.currentMembers(owner, n.Name)}
}

// currentMembers returns the addresses NB has now in node's sets of one
// owner type (both families), parsed once per translation.
func (t *translator) currentMembers(owner, node string) map[netip.Addr]bool {
	key := owner + "/" + node
	if m, ok := t.current[key]; ok {
		return m
	}
	m := map[netip.Addr]bool{}
	for _, f := range ipfamily.All {
		for _, a := range t.in.Current[AddressSetName(setID(owner, node, f))] {
			if ip, err := netip.ParseAddr(a); err == nil {
				m[ipfamily.Canonical(ip)] = true
			}
		}
	}
	t.current[key] = m
	return m
}
