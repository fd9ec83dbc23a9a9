package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// What one resolved EgressService puts into address sets: its
// contributions, computed from it and the facts alone (contribute).

// Members reads the addresses an owned address set has in NB now, by
// name (nil: none). While a host's agent has not caught up with a service,
// the service keeps the endpoints already there and gains no new ones.
type Members interface {
	Members(set string) []string
}

// MembersMap is a Members of a fixed map (Input.Current).
type MembersMap map[string][]string

// Members implements Members.
func (m MembersMap) Members(set string) []string { return m[set] }

// facts is what an EgressService's rows read besides its own objects.
type facts struct {
	cfg      translate.Config
	zone     string
	nodes    map[string]*translate.NodeInfo
	gateways map[string]translate.GatewayInfo
	current  Members
	// podSubnets are the nodes' pod subnets (built when first needed,
	// dropped when a node's subnets change).
	podSubnets map[netip.Prefix]string
}

// inZone reports whether a node belongs to the zone being translated (every
// node does without a zone).
func (w *facts) inZone(node string) bool {
	if w.zone == "" {
		return true
	}
	n := w.nodes[node]
	return n != nil && n.ZoneName() == w.zone
}

// podSubnet finds the node whose pod subnet holds ip.
func (w *facts) podSubnet(ip netip.Addr) (string, netip.Prefix, bool) {
	if w.podSubnets == nil {
		w.podSubnets = map[netip.Prefix]string{}
		for _, n := range w.nodes {
			for _, p := range n.Subnets {
				w.podSubnets[p.Masked()] = n.Name
			}
		}
	}
	for p, node := range w.podSubnets {
		if p.Contains(ip) {
			return node, p, true
		}
	}
	return "", netip.Prefix{}, false
}

// setKey names one reroute (or drop) address set: (node, owner type, family).
type setKey struct {
	node   string
	owner  string
	family ipfamily.Family
}

// key is the key whose rows hold the set.
func (k setKey) key() translate.Key {
	if k.owner == translate.OwnerUnassigned {
		return translate.UnassignedKey
	}
	return translate.NodeKey(k.node)
}

// contribution is what one EgressService puts into one address set:
// addresses and, on the gateway path, their NAT rows.
type contribution struct {
	set     setKey
	svc     string // the EgressService's "namespace/name"
	nexthop netip.Addr
	addrs   []netip.Addr
	nats    []natEntry
	// nodeSNAT is the host GR's own SNAT of the family (gateway path with
	// Config.NATMatch): kept for the served endpoints' traffic to node
	// addresses.
	nodeSNAT translate.GatewaySNAT
}

// natEntry is one snat NAT row: endpoint ep leaves as ext, for service svc.
type natEntry struct {
	ep, ext netip.Addr
	svc     string
}

// result is everything one EgressService's translation gives: its
// contributions, its problems, and what it read of the facts (so that a
// change there translates it again).
type result struct {
	mode  mode
	parts []*contribution
	// problems, in the order found, each once.
	problems []translate.Problem
	// reads are the nodes whose facts it read (its host, or its
	// endpoints' nodes); readsNB those whose NB members it read.
	reads, readsNB []string
	// route names the host of this zone that routes the cluster's pod
	// traffic for it (interconnect; "" none).
	route string
}

// translateService is the whole translation of one EgressService.
func (w *facts) translateService(e *serviceEntry, winner func(netip.Addr) string) *result {
	s := w.resolve(e, winner)
	r := &result{mode: s.mode}
	switch s.mode {
	case modeHost, modeGateway:
		r.parts = w.hosted(s, r)
		if w.zone != "" && w.inZone(s.host.Name) {
			r.route = s.host.Name
		}
	case modeNetwork:
		r.parts = w.network(s, r)
	}
	if w.cfg.UnassignedTraffic == translate.UnassignedDrop {
		if c := w.unassigned(s, r.parts); c != nil {
			r.parts = append(r.parts, c...)
		}
	}
	if host := s.EgressService.Status.Host; host != "" && host != egressv1.HostAll {
		r.reads = append(r.reads, host)
	}
	// Network mode reads every endpoint node's facts. A zone's LoadBalancerIP
	// services read of their endpoints' nodes only whether each is in the
	// zone: Index.SetNode translates again the services with an endpoint on
	// a node whose membership changed (at 5,000 nodes, a set of readers per
	// endpoint node would cost every agent some 10 MiB).
	if s.mode == modeNetwork {
		for _, ep := range s.eps {
			r.reads = append(r.reads, ep.Node)
		}
	}
	slices.Sort(r.reads)
	r.reads = slices.Compact(r.reads)
	slices.Sort(r.readsNB)
	r.readsNB = slices.Compact(r.readsNB)
	r.problems = s.problems
	return r
}

// hosted computes a LoadBalancerIP service's contributions to its host's
// sets (host or gateway path), family by family.
func (w *facts) hosted(s *resolved, r *result) []*contribution {
	owner := translate.OwnerHost
	if s.mode == modeGateway {
		owner = translate.OwnerGateway
		if gw, ok := w.gateways[s.host.Name]; ok && gw.ExternalPortKnown && !gw.NATAddressesRouter {
			s.problem(translate.ReasonNATAddressesNotRouter,
				"port etor-%s lacks options:nat-addresses=router; moved SNAT addresses are not announced", translate.GatewayRouter(s.host.Name))
		}
	}
	// The host's own zone reroutes every endpoint the host serves (local
	// ones, and remote ones arriving over the transit switch) to it; any
	// other zone reroutes only its local endpoints, to the host's
	// transit-switch address, and writes no NAT rows.
	local := w.inZone(s.host.Name)
	var v4, v6 []translate.Endpoint
	for _, e := range s.eps {
		if local || w.inZone(e.Node) {
			if ipfamily.Of(e.IP) == ipfamily.V4 {
				v4 = append(v4, e)
			} else {
				v6 = append(v6, e)
			}
		}
	}
	var parts []*contribution
	var eligible admission
	decided := false
	for _, f := range w.cfg.Families() {
		eps := v4
		if f == ipfamily.V6 {
			eps = v6
		}
		ingress, ok := s.ingress[f]
		if !ok {
			if len(eps) > 0 {
				s.problem(translate.ReasonFamilyWithoutIngressIP, "Service %s has %s endpoints but no %s ingress IP; they are not rerouted", s.key, f.Name(), f.Name())
			}
			continue
		}
		var nexthop netip.Addr
		if local {
			nexthop, ok = w.nexthop(s, s.host, owner, f)
		} else {
			nexthop, ok = s.host.TransitIPs[f]
			if !ok {
				s.problem(translate.ReasonTransitAddressMissing, "host %s is in zone %s but has no %s address in %s; zone %s does not reroute to it",
					s.host.Name, s.host.ZoneName(), f.Name(), translate.AnnotTransitIfAddr, w.zone)
			}
		}
		if !ok {
			continue
		}
		c := &contribution{set: setKey{s.host.Name, owner, f}, svc: s.key, nexthop: nexthop, addrs: make([]netip.Addr, 0, len(eps))}
		if owner == translate.OwnerGateway && local && w.cfg.NATMatch {
			c.nodeSNAT = w.nodeSNAT(s.host, f)
		}
		parts = append(parts, c)
		if owner == translate.OwnerHost && !decided {
			eligible, decided = w.eligible(s, r, s.host, translate.OwnerHost), true
		}
		for _, e := range eps {
			if owner == translate.OwnerHost && !eligible.admits(e.IP) {
				continue
			}
			c.addrs = append(c.addrs, e.IP)
			if owner == translate.OwnerGateway && local {
				c.nats = append(c.nats, natEntry{ep: e.IP, ext: ingress, svc: s.key})
			}
		}
	}
	return parts
}

// network reroutes each node's own endpoints of a Network-mode service to
// that node's management port, for nodes in shared gateway mode (in local
// gateway mode the traffic already leaves through the host).
func (w *facts) network(s *resolved, r *result) []*contribution {
	byNode := map[string][]translate.Endpoint{}
	for _, e := range s.eps {
		byNode[e.Node] = append(byNode[e.Node], e)
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	var parts []*contribution
	for _, name := range nodes {
		n := w.nodes[name]
		if n == nil || !n.SharedGateway() || !w.inZone(name) {
			continue
		}
		eps := byNode[name]
		var eligible admission
		decided := false
		for _, f := range w.cfg.Families() {
			nexthop, ok := w.nexthop(s, n, translate.OwnerNetwork, f)
			if !ok {
				continue
			}
			c := &contribution{set: setKey{name, translate.OwnerNetwork, f}, svc: s.key, nexthop: nexthop}
			if !decided {
				eligible, decided = w.eligible(s, r, n, translate.OwnerNetwork), true
			}
			for _, e := range eps {
				if ipfamily.Of(e.IP) == f && eligible.admits(e.IP) {
					c.addrs = append(c.addrs, e.IP)
				}
			}
			parts = append(parts, c)
		}
	}
	return parts
}

// unassigned is what a LoadBalancerIP service puts into the drop sets of
// --unassigned-traffic=drop: every endpoint of this zone that its own
// contributions do not reroute (no host, host not ready, family without
// ingress IP) — fail closed. An endpoint address reroutes for one service
// at most (resolveClaims), so what the others reroute does not matter.
func (w *facts) unassigned(s *resolved, parts []*contribution) []*contribution {
	if s.EgressService.Spec.SourceIPBy == egressv1.Network || s.Service == nil || !translate.IsLoadBalancer(s.Service) {
		return nil
	}
	rerouted := map[netip.Addr]bool{}
	for _, c := range parts {
		for _, ip := range c.addrs {
			rerouted[ip] = true
		}
	}
	drop := map[ipfamily.Family]*contribution{}
	dropped := 0
	for _, e := range s.eps {
		if rerouted[e.IP] || !w.inZone(e.Node) {
			continue
		}
		f := ipfamily.Of(e.IP)
		if drop[f] == nil {
			drop[f] = &contribution{set: setKey{unassignedName, translate.OwnerUnassigned, f}, svc: s.key}
		}
		drop[f].addrs = append(drop[f].addrs, e.IP)
		dropped++
	}
	if dropped == 0 {
		return nil
	}
	s.problem(translate.ReasonUnassignedTrafficDrop, "%d endpoint(s) have no working host; their traffic leaving the cluster is dropped (--unassigned-traffic=drop)", dropped)
	var out []*contribution
	for _, f := range ipfamily.All {
		if c := drop[f]; c != nil {
			out = append(out, c)
		}
	}
	return out
}

// nexthop returns where a set of this owner type on node n reroutes to.
func (w *facts) nexthop(s *resolved, n *translate.NodeInfo, owner string, f ipfamily.Family) (netip.Addr, bool) {
	if owner == translate.OwnerGateway {
		if gw, ok := w.gateways[n.Name]; ok {
			if ip, ok := gw.JoinIPs[f]; ok {
				return ip, true
			}
		}
		if ip, ok := n.JoinIPs[f]; ok {
			return ip, true
		}
		s.problem(translate.ReasonGatewayNotFound, "no %s join address for %s (NB port rtoj-%s or annotation %s)", f.Name(), translate.GatewayRouter(n.Name), translate.GatewayRouter(n.Name), translate.AnnotGRLRPIfAddr)
		return netip.Addr{}, false
	}
	if ip, ok := n.MgmtIPs[f]; ok {
		return ip, true
	}
	s.problem(translate.ReasonNodeAnnotationMissing, "node %s has no %s subnet in %s", n.Name, f.Name(), translate.AnnotNodeSubnets)
	return netip.Addr{}, false
}

// nodeSNAT is the SNAT a host's GR gives its node's pods in family f: the
// one NB shows on the GR, else the node's first address of the family (what
// ovn-kubernetes' shared gateway mode SNATs to).
func (w *facts) nodeSNAT(n *translate.NodeInfo, f ipfamily.Family) translate.GatewaySNAT {
	if gw, ok := w.gateways[n.Name]; ok {
		if s, ok := gw.SNAT[f]; ok {
			return s
		}
	}
	for _, ip := range n.HostIPs {
		if ipfamily.Of(ip) == f {
			return translate.GatewaySNAT{ExternalIP: ip}
		}
	}
	return translate.GatewaySNAT{}
}

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
func (w *facts) eligible(s *resolved, r *result, n *translate.NodeInfo, owner string) admission {
	if w.cfg.AssumeAgentsReady {
		return admission{all: true}
	}
	rep, ok := n.Report[s.key]
	if !ok {
		s.problem(translate.ReasonAgentNotReady, "the node agent on %s has not reported this service programmed yet", n.Name)
		return admission{}
	}
	want := translate.EndpointsHash(translate.AgentEndpoints(s.EgressService.Status.Host, n.Name, s.claims, s.ingress))
	if rep.Network == s.EgressService.Spec.Network && slices.Equal(rep.IngressIPs, translate.ReportIPs(s.ingress)) && rep.Endpoints == want {
		return admission{all: true}
	}
	s.problem(translate.ReasonAgentNotReady, "the node agent on %s has not caught up with this service yet; new endpoints wait", n.Name)
	r.readsNB = append(r.readsNB, n.Name)
	return admission{current: w.currentMembers(owner, n.Name)}
}

// currentMembers returns the addresses NB has now in node's sets of one
// owner type (both families).
func (w *facts) currentMembers(owner, node string) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	if w.current == nil {
		return m
	}
	for _, f := range ipfamily.All {
		for _, a := range w.current.Members(translate.AddressSetName(setID(owner, node, f))) {
			if ip, err := netip.ParseAddr(a); err == nil {
				m[ipfamily.Canonical(ip)] = true
			}
		}
	}
	return m
}
