package translate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// UnassignedKey holds the drop rows of --unassigned-traffic=drop.
const UnassignedKey Key = "unassigned"

// unassignedName is the k8s.ovn.org/name of the unassigned-traffic rows.
const unassignedName = "unassigned"

// Desired is the outcome of a translation: the rows per key and the problems.
type Desired struct {
	Rows     map[Key]*Rows
	Problems Problems
	// ReleaseClusterRoutes: owned cluster routes nobody wants any more are
	// handed over (their ovn-egress external_ids removed), not deleted:
	// ovn-kubernetes relies on them (Input.ClusterRouteShared).
	ReleaseClusterRoutes bool
	// Stale: a service of Input.Kept was not in the Memo; the rows are
	// incomplete and must not be applied. Translate again without Kept.
	Stale bool
}

// Keys returns the keys that have rows, sorted.
func (d *Desired) Keys() []Key {
	out := make([]Key, 0, len(d.Rows))
	for k := range d.Rows {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Count returns the number of rows per table name.
func (d *Desired) Count() (addressSets, policies, nats, addresses int) {
	for _, r := range d.Rows {
		addressSets += len(r.AddressSets)
		policies += len(r.Policies)
		nats += len(r.NATs)
		for _, as := range r.AddressSets {
			addresses += len(as.Addresses)
		}
	}
	return
}

type mode int

const (
	modeNone    mode = iota // no host: nothing rerouted
	modeHost                // LoadBalancerIP, SNAT by the node agent
	modeGateway             // LoadBalancerIP, SNAT by NAT rows on GR_<host>
	modeNetwork             // sourceIPBy=Network, host ALL
)

// service is one EgressService with everything resolved about it, and what
// it puts into address sets. A service taken from the Memo is shared with
// earlier translations and is never modified.
type service struct {
	key     string
	es      *egressv1.EgressService
	svc     *corev1.Service
	eps     []Endpoint // after conflicts are resolved
	allEps  []Endpoint // as the Service has them (what the agent hashes)
	ingress map[ipfamily.Family]netip.Addr
	mode    mode
	host    *NodeInfo

	// parts are its contributions to address sets (host and gateway path).
	parts []*contribution
	// resolved and hosted are the problems found by resolve and by
	// addHosted, replayed when the service comes from the Memo.
	resolved, hosted []Problem
	// fromMemo: taken from the Memo; memoizable: its result depends only on
	// what the Memo compares (no shared endpoint, no NB members, not Network).
	fromMemo, memoizable bool
}

// setKey names one reroute address set: (node, owner type, family).
type setKey struct {
	node   string
	owner  string
	family ipfamily.Family
}

// contribution is what one service (or the unassigned rows) puts into one
// address set: addresses and, on the gateway path, their NAT rows.
type contribution struct {
	set setKey
	svc string // the EgressService's "namespace/name" ("" for the unassigned rows)
	// owner is the Memo's result of svc that holds it (nil: none).
	owner   *memoService
	nexthop netip.Addr
	addrs   []netip.Addr
	nats    []natEntry
	// nodeSNAT is the host GR's own SNAT of the family (gateway path with
	// Config.NATMatch): kept for the served endpoints' traffic to node
	// addresses.
	nodeSNAT GatewaySNAT
}

// natEntry is one snat NAT row: endpoint ep leaves as ext, for service svc.
type natEntry struct {
	ep, ext netip.Addr
	svc     string
}

// setAcc gathers the contributions to one address set.
type setAcc struct {
	nexthop netip.Addr
	parts   []*contribution
	// carried, for a set of an Input.Unlisted host, is its last rendering:
	// its contributions stay, but for removed (the old results of services
	// given now), and parts are only the given services' ones.
	carried *memoSet
	removed []*contribution
}

type translator struct {
	in       Input
	d        *Desired
	memo     *Memo
	sets     map[setKey]*setAcc
	rerouted map[netip.Addr]bool            // only with --unassigned-traffic=drop
	reported map[string]bool                // problem de-duplication
	current  map[string]map[netip.Addr]bool // parsed NB members, by owner/node
	// podSubnets are the nodes' pod subnets (built when first needed).
	podSubnets map[netip.Prefix]string
}

// Translate computes the desired NB rows of the whole input (restricted to
// in.Only when set). It is deterministic: the same input gives the same rows
// in the same order.
func Translate(in Input) *Desired {
	t := &translator{in: in, d: &Desired{Rows: map[Key]*Rows{}}, memo: in.Memo.begin(in),
		sets: map[setKey]*setAcc{}, reported: map[string]bool{}, current: map[string]map[netip.Addr]bool{}}
	if in.Config.UnassignedTraffic == UnassignedDrop {
		t.rerouted = map[netip.Addr]bool{}
	}
	svcs := make([]*service, 0, len(in.EgressServices))
	for _, es := range sortedEgressServices(in.EgressServices) {
		if s := t.memo.service(t, es); s != nil {
			t.replay(s.resolved)
			svcs = append(svcs, s)
			continue
		}
		svcs = append(svcs, t.resolveCaptured(es))
	}
	t.resolveConflicts(svcs)
	for _, s := range svcs {
		switch s.mode {
		case modeHost, modeGateway:
			if s.fromMemo {
				t.replay(s.hosted)
			} else {
				start := len(t.d.Problems)
				s.parts = t.addHosted(s)
				s.hosted = slices.Clone(t.d.Problems[start:])
			}
			for _, c := range s.parts {
				t.add(c, true)
			}
		case modeNetwork:
			t.addNetwork(s)
		}
		if !s.fromMemo {
			t.memo.store(t, s) // or drop what it held, when not memoizable
		}
	}
	// Kept services share no endpoint (they take no part in conflicts) and
	// are hosted (Network mode is never memoized): only their contributions.
	for _, es := range in.Kept {
		s := t.memo.kept(t, es)
		if s == nil {
			t.d.Stale = true
			continue
		}
		for _, c := range s.parts {
			t.add(c, true)
		}
		svcs = append(svcs, s)
	}
	// An unlisted host keeps its other services' contributions of last time.
	if len(in.Unlisted) > 0 && !t.memo.unlisted(t, svcs) {
		t.d.Stale = true
	}
	if t.d.Stale {
		t.memo = nil // an incomplete result is not what the Memo may keep of a set
	}
	if in.Config.UnassignedTraffic == UnassignedDrop {
		t.addUnassigned(svcs)
	}
	if in.Zone != "" {
		t.addClusterRoutes(svcs)
	}
	t.emitSets()
	t.memo.settle(t)
	t.emitNodeIPs()
	for k, r := range t.d.Rows {
		if in.Only != nil && !in.Only[k] {
			delete(t.d.Rows, k)
			continue
		}
		r.sort()
	}
	slices.SortStableFunc(t.d.Problems, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) })
	return t.d
}

// inZone reports whether a node belongs to the zone being translated (every
// node does without a zone).
func (t *translator) inZone(node string) bool {
	if t.in.Zone == "" {
		return true
	}
	n := t.in.Nodes[node]
	return n != nil && n.ZoneName() == t.in.Zone
}

func (t *translator) problem(key string, r Reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	id := key + "\x00" + string(r) + "\x00" + msg
	if t.reported[id] {
		return
	}
	t.reported[id] = true
	t.d.Problems = append(t.d.Problems, Problem{Key: key, Reason: r, Message: msg})
}

// resolveCaptured resolves a service and keeps the problems found, for the Memo.
func (t *translator) resolveCaptured(es *egressv1.EgressService) *service {
	start := len(t.d.Problems)
	s := t.resolve(es)
	s.resolved = slices.Clone(t.d.Problems[start:])
	return s
}

// replay reports a memoized service's problems again.
func (t *translator) replay(ps []Problem) {
	for _, p := range ps {
		t.problem(p.Key, p.Reason, "%s", p.Message)
	}
}

// resolve finds the Service, endpoints, ingress IPs and mode of one EgressService.
func (t *translator) resolve(es *egressv1.EgressService) *service {
	s := &service{key: EgressServiceKey(es), es: es}
	s.svc = t.in.Services[s.key]
	_, given := t.in.Endpoints[s.key]
	// Memoizable unless it reads what the Memo does not compare: endpoints
	// computed here, or (Network mode) every endpoint's node.
	s.memoizable = t.memo != nil && (s.svc == nil || given) && es.Spec.SourceIPBy != egressv1.Network
	switch {
	case s.svc == nil:
		t.problem(s.key, ReasonServiceNotFound, "Service %s not found", s.key)
		return s
	case !IsLoadBalancer(s.svc):
		t.problem(s.key, ReasonServiceNotLoadBalancer, "Service %s is of type %s, not LoadBalancer", s.key, s.svc.Spec.Type)
		return s
	}
	if eps, ok := t.in.Endpoints[s.key]; ok {
		s.eps = eps
	} else {
		s.eps = ServiceEndpoints(s.svc, t.in.EndpointSlices[s.key], t.in.Config.ClusterSubnets)
	}
	s.allEps = s.eps
	for _, m := range MisplacedEndpoints(s.svc, t.in.EndpointSlices[s.key], t.in.Config.ClusterSubnets, t.podSubnet) {
		t.problem(s.key, ReasonEndpointOutsideClusterSubnets, "%s", m.message(t.in.Config.ClusterSubnets))
	}
	if len(s.eps) == 0 {
		t.problem(s.key, ReasonNoEndpoints, "Service %s has no cluster-networked endpoints", s.key)
		return s
	}
	host := es.Status.Host
	if es.Spec.SourceIPBy == egressv1.Network {
		if host != egressv1.HostAll {
			t.problem(s.key, ReasonNoHost, "sourceIPBy is Network but status.host is %q, not ALL", host)
			return s
		}
		s.mode = modeNetwork
		return s
	}
	var multiple []ipfamily.Family
	s.ingress, multiple = IngressIPs(s.svc)
	for _, f := range multiple {
		t.problem(s.key, ReasonMultipleIngressIPs, "Service %s has more than one %s ingress IP; %s is used", s.key, f.Name(), s.ingress[f])
	}
	if len(s.ingress) == 0 {
		t.problem(s.key, ReasonNoIngressIP, "Service %s has no load-balancer ingress IP", s.key)
		return s
	}
	// Host selection refuses these too (and node addresses, and an IP of
	// two namespaces); a status.host someone else wrote gets no rows either.
	nets := IngressNetworks{t.in.Config.ClusterSubnets, t.in.Config.JoinSubnets, t.in.Config.ServiceCIDRs}
	for _, f := range ipfamily.All {
		if ip, ok := s.ingress[f]; ok {
			if why := nets.Refusal(ip, nil); why != "" {
				t.problem(s.key, ReasonInvalidIngressIP, "load-balancer ingress IP %s %s: pods never leave with it", ip, why)
				s.ingress = nil
				return s
			}
		}
	}
	switch n := t.in.Nodes[host]; {
	case host == "":
		t.problem(s.key, ReasonNoHost, "no host is assigned (status.host is empty)")
	case host == egressv1.HostAll || n == nil:
		t.problem(s.key, ReasonUnknownHost, "status.host %q is not a known node", host)
	default:
		s.host = n
		s.mode = modeHost
		if t.in.Config.Backend == BackendOVN && es.Spec.Network == "" && n.SharedGateway() {
			s.mode = modeGateway
		}
	}
	return s
}

// resolveConflicts gives an endpoint address claimed by several
// EgressServices to the lexically first namespace/name, and removes it from
// the others (which are told so).
func (t *translator) resolveConflicts(svcs []*service) {
	n := 0
	for _, s := range svcs {
		n += len(s.eps)
	}
	owner := t.memo.ownerMap(n) // address -> index in svcs
	for i, s := range svcs {
		var kept []Endpoint // only allocated once an endpoint is dropped
		for j, e := range s.eps {
			if o, ok := owner[e.IP]; ok && int(o) != i {
				if kept == nil {
					if s.fromMemo {
						// The memoized result assumed no shared endpoint.
						s = t.resolveCaptured(s.es)
						svcs[i] = s
					}
					kept = append(make([]Endpoint, 0, len(s.eps)), s.eps[:j]...)
				}
				t.problem(s.key, ReasonSharedEndpoint, "endpoint %s also backs EgressService %s, which takes precedence", e.IP, svcs[o].key)
				continue
			}
			owner[e.IP] = int32(i)
			if kept != nil {
				kept = append(kept, e)
			}
		}
		if kept != nil {
			s.eps, s.memoizable = kept, false
		}
	}
}

// add puts a contribution into its set (the first contribution sets the
// nexthop); rerouted contributions mark their addresses as rerouted (what
// the unassigned-traffic drop leaves out).
func (t *translator) add(c *contribution, rerouted bool) {
	acc := t.sets[c.set]
	if acc == nil {
		acc = &setAcc{nexthop: c.nexthop}
		t.sets[c.set] = acc
	}
	acc.parts = append(acc.parts, c)
	if rerouted && t.rerouted != nil {
		for _, ip := range c.addrs {
			t.rerouted[ip] = true
		}
	}
}

// addHosted computes a LoadBalancerIP service's contributions to its host's
// sets (host or gateway path), family by family.
func (t *translator) addHosted(s *service) []*contribution {
	owner := OwnerHost
	if s.mode == modeGateway {
		owner = OwnerGateway
		if gw, ok := t.in.Gateways[s.host.Name]; ok && gw.ExternalPortKnown && !gw.NATAddressesRouter {
			t.problem(s.key, ReasonNATAddressesNotRouter,
				"port etor-%s lacks options:nat-addresses=router; moved SNAT addresses are not announced", GatewayRouter(s.host.Name))
		}
	}
	// The host's own zone reroutes every endpoint the host serves (local
	// ones, and remote ones arriving over the transit switch) to it; any
	// other zone reroutes only its local endpoints, to the host's
	// transit-switch address, and writes no NAT rows.
	local := t.inZone(s.host.Name)
	var v4, v6 []Endpoint
	for _, e := range s.eps {
		if local || t.inZone(e.Node) {
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
	for _, f := range t.in.Config.Families() {
		eps := v4
		if f == ipfamily.V6 {
			eps = v6
		}
		ingress, ok := s.ingress[f]
		if !ok {
			if len(eps) > 0 {
				t.problem(s.key, ReasonFamilyWithoutIngressIP, "Service %s has %s endpoints but no %s ingress IP; they are not rerouted", s.key, f.Name(), f.Name())
			}
			continue
		}
		var nexthop netip.Addr
		if local {
			nexthop, ok = t.nexthop(s.key, s.host, owner, f)
		} else {
			nexthop, ok = s.host.TransitIPs[f]
			if !ok {
				t.problem(s.key, ReasonTransitAddressMissing, "host %s is in zone %s but has no %s address in %s; zone %s does not reroute to it",
					s.host.Name, s.host.ZoneName(), f.Name(), AnnotTransitIfAddr, t.in.Zone)
			}
		}
		if !ok {
			continue
		}
		c := &contribution{set: setKey{s.host.Name, owner, f}, svc: s.key, nexthop: nexthop, addrs: make([]netip.Addr, 0, len(eps))}
		if owner == OwnerGateway && local && t.in.Config.NATMatch {
			c.nodeSNAT = t.nodeSNAT(s.host, f)
		}
		parts = append(parts, c)
		if owner == OwnerHost && !decided {
			eligible, decided = t.eligible(s, s.host, OwnerHost), true
		}
		for _, e := range eps {
			if owner == OwnerHost && !eligible.admits(e.IP) {
				continue
			}
			c.addrs = append(c.addrs, e.IP)
			if owner == OwnerGateway && local {
				c.nats = append(c.nats, natEntry{ep: e.IP, ext: ingress, svc: s.key})
			}
		}
	}
	return parts
}

// addNetwork reroutes each node's own endpoints of a Network-mode service to
// that node's management port, for nodes in shared gateway mode (in local
// gateway mode the traffic already leaves through the host).
func (t *translator) addNetwork(s *service) {
	byNode := map[string][]Endpoint{}
	for _, e := range s.eps {
		byNode[e.Node] = append(byNode[e.Node], e)
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, name := range nodes {
		n := t.in.Nodes[name]
		if n == nil || !n.SharedGateway() || !t.inZone(name) {
			continue
		}
		eps := byNode[name]
		var eligible admission
		decided := false
		for _, f := range t.in.Config.Families() {
			nexthop, ok := t.nexthop(s.key, n, OwnerNetwork, f)
			if !ok {
				continue
			}
			c := &contribution{set: setKey{name, OwnerNetwork, f}, svc: s.key, nexthop: nexthop}
			if !decided {
				eligible, decided = t.eligible(s, n, OwnerNetwork), true
			}
			for _, e := range eps {
				if ipfamily.Of(e.IP) == f && eligible.admits(e.IP) {
					c.addrs = append(c.addrs, e.IP)
				}
			}
			t.add(c, true)
		}
	}
}

// nexthop returns where a set of this owner type on node n reroutes to.
func (t *translator) nexthop(svcKey string, n *NodeInfo, owner string, f ipfamily.Family) (netip.Addr, bool) {
	if owner == OwnerGateway {
		if gw, ok := t.in.Gateways[n.Name]; ok {
			if ip, ok := gw.JoinIPs[f]; ok {
				return ip, true
			}
		}
		if ip, ok := n.JoinIPs[f]; ok {
			return ip, true
		}
		t.problem(svcKey, ReasonGatewayNotFound, "no %s join address for %s (NB port rtoj-%s or annotation %s)", f.Name(), GatewayRouter(n.Name), GatewayRouter(n.Name), AnnotGRLRPIfAddr)
		return netip.Addr{}, false
	}
	if ip, ok := n.MgmtIPs[f]; ok {
		return ip, true
	}
	t.problem(svcKey, ReasonNodeAnnotationMissing, "node %s has no %s subnet in %s", n.Name, f.Name(), AnnotNodeSubnets)
	return netip.Addr{}, false
}

func setID(owner, name string, f ipfamily.Family, extra ...string) string {
	return ownerIDs(owner, name, f, extra...)[KeyID]
}

// podSubnet finds the node whose pod subnet holds ip.
func (t *translator) podSubnet(ip netip.Addr) (string, netip.Prefix, bool) {
	if t.podSubnets == nil {
		t.podSubnets = map[netip.Prefix]string{}
		for _, n := range t.in.Nodes {
			for _, p := range n.Subnets {
				t.podSubnets[p.Masked()] = n.Name
			}
		}
	}
	for p, node := range t.podSubnets {
		if p.Contains(ip) {
			return node, p, true
		}
	}
	return "", netip.Prefix{}, false
}

func (t *translator) rows(k Key) *Rows {
	r := t.d.Rows[k]
	if r == nil {
		r = &Rows{}
		t.d.Rows[k] = r
	}
	return r
}
