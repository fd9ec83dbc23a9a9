package egressip

import (
	"encoding/json"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// LabelEgressAssignable marks the nodes that may hold egress IPs (the label
// ovn-kubernetes uses; its value does not matter).
const LabelEgressAssignable = "k8s.ovn.org/egress-assignable"

// Reasons reported for an EgressIP: ovn-kubernetes' where it has one.
const (
	// ReasonEgressIPInvalid: an item of spec.egressIPs is not an address.
	ReasonEgressIPInvalid translate.Reason = "InvalidEgressIP"
	// ReasonEgressIPConflict: the IP is a node's own address.
	ReasonEgressIPConflict translate.Reason = "EgressIPConflict"
	// ReasonEgressIPTaken: another EgressIP holds the IP.
	ReasonEgressIPTaken translate.Reason = "UnsupportedRequest"
	// ReasonNoMatchingNode: no node can hold the IP now.
	ReasonNoMatchingNode translate.Reason = "NoMatchingNodeFound"
)

// EgressIPNode is what assignment needs to know about one Node.
type EgressIPNode struct {
	Name string
	// Ready, Reachable (health checks) and Assignable (the label) must all
	// hold for the node to take an IP.
	Ready, Reachable, Assignable bool
	// Recovering: the node answers again after being unreachable and is in
	// its hold-down — a candidate only when no other node can take the IP,
	// so a flapping node does not draw IPs (it keeps those it holds).
	Recovering bool
	// Primary are the networks of the node's primary interface
	// (k8s.ovn.org/node-primary-ifaddr, one per family).
	Primary []netip.Prefix
	// HostNetworks are the networks of every host interface
	// (k8s.ovn.org/host-cidrs): on bare metal an IP may be held on one.
	HostNetworks []netip.Prefix
	// Addresses are the node's own addresses: no egress IP may be one.
	Addresses []netip.Addr
	// Gateways are its gateway router's next hops (l3-gateway-config): no
	// egress IP may be one either (the agent would announce the
	// segment's router as its own).
	Gateways []netip.Addr
}

// ParseEgressIPNode reads a Node's egress-IP facts; reachable is the health
// checks' verdict. What cannot be parsed is left out (the node then
// contains fewer networks).
func ParseEgressIPNode(n *corev1.Node, reachable bool) *EgressIPNode {
	_, assignable := n.Labels[LabelEgressAssignable]
	out := &EgressIPNode{Name: n.Name, Ready: translate.NodeReady(n), Reachable: reachable, Assignable: assignable}
	var m map[string]string
	if json.Unmarshal([]byte(n.Annotations[translate.AnnotPrimaryIfAddr]), &m) == nil {
		for k, v := range m {
			f, err := ipfamily.Parse(k)
			if p, perr := netip.ParsePrefix(v); err == nil && perr == nil && ipfamily.OfPrefix(p) == f {
				out.Primary = append(out.Primary, canonicalPrefix(p))
			}
		}
		slices.SortFunc(out.Primary, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	}
	var list []string
	if json.Unmarshal([]byte(n.Annotations[translate.AnnotHostCIDRs]), &list) == nil {
		for _, s := range list {
			if p, err := netip.ParsePrefix(s); err == nil {
				out.HostNetworks = append(out.HostNetworks, canonicalPrefix(p))
			}
		}
	}
	info := &translate.NodeInfo{}
	out.Addresses = translate.NodeHostIPs(n, info)
	if v := n.Annotations[translate.AnnotL3GatewayCfg]; v != "" {
		translate.ParseGatewayConfig(v, info)
	}
	out.Gateways = info.GatewayNextHops
	return out
}

// Refusal says why ip may never be an egress IP on this node's segments
// ("" when it may): it is the node's own address, its gateway, or the
// network or (IPv4) broadcast address of one of its networks. Hosts
// answering for it would take over a router's or a neighbour's traffic.
func (n *EgressIPNode) Refusal(ip netip.Addr) string {
	ip = ipfamily.Canonical(ip)
	switch {
	case slices.Contains(n.Addresses, ip):
		return "is an address of node " + n.Name
	case slices.Contains(n.Gateways, ip):
		return "is the gateway of node " + n.Name
	}
	for _, p := range slices.Concat(n.Primary, n.HostNetworks) {
		if !p.Contains(ip) {
			continue
		}
		if single := p.Bits() == ip.BitLen() || (ip.Is4() && p.Bits() == 31); single {
			continue // a /32, /128 or point-to-point /31 has no network address
		}
		if ip == p.Masked().Addr() {
			return fmt.Sprintf("is the network address of %s (node %s)", p, n.Name)
		}
		if ip.Is4() && ip == lastAddr(p) {
			return fmt.Sprintf("is the broadcast address of %s (node %s)", p, n.Name)
		}
	}
	return ""
}

// AnnounceRefusal says why this node must not announce ip as its own
// ("" when it may): an address no host may hold, one outside the node's
// networks, or one Refusal names. The agent's last guard against a forged
// or stale status item.
func (n *EgressIPNode) AnnounceRefusal(ip netip.Addr) string {
	ip = ipfamily.Canonical(ip)
	if why := (translate.IngressNetworks{}).Refusal(ip, nil); why != "" {
		return why
	}
	if !n.contains(ip) {
		return "is outside node " + n.Name + "'s networks"
	}
	return n.Refusal(ip)
}

// lastAddr is the highest address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(b)
}

func canonicalPrefix(p netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(ipfamily.Canonical(p.Addr()), p.Bits()).Masked()
}

// contains reports whether the node has a network that may hold ip: its
// primary network, or one of its host networks.
func (n *EgressIPNode) contains(ip netip.Addr) bool {
	in := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(ip) })
	}
	return in(n.Primary) || in(n.HostNetworks)
}

// eligible says why the node cannot take ip now ("" when it can).
func (n *EgressIPNode) eligible(ip netip.Addr) string {
	switch {
	case !n.Assignable:
		return "not labelled " + LabelEgressAssignable
	case !n.Ready:
		return "not Ready"
	case !n.Reachable:
		return "unreachable (health check)"
	case !n.contains(ip):
		return "no network of it contains the IP"
	}
	return ""
}

// EgressIPInput is everything assignment reads.
type EgressIPInput struct {
	EgressIPs []*egressipv1.EgressIP
	Nodes     map[string]*EgressIPNode
}

// EgressIPResult is the assignment of every EgressIP, by name.
type EgressIPResult struct {
	// Items are the status.items each EgressIP should have, in the order of
	// its spec.egressIPs.
	Items    map[string][]egressipv1.EgressIPStatusItem
	Problems translate.Problems
}

// Changed reports whether es's status differs from what r assigns it.
func (r EgressIPResult) Changed(es *egressipv1.EgressIP) bool {
	return !slices.Equal(es.Status.Items, r.Items[es.Name])
}

// AssignEgressIPs assigns every IP of every EgressIP to at most one node:
// Ready, reachable, labelled egress-assignable, with a network that
// contains the IP; one IP of an object per node; a node in its health
// hold-down only when no other can; the node holding the fewest IPs first,
// ties by name. Assignments are sticky: an IP whose
// current node is still eligible stays on it. An IP equal to a node's own
// address, held by another EgressIP, or no address at all is refused, and
// every IP left unassigned is a Problem saying why in one line. Objects are
// decided in name order, so two claiming one IP always resolve the same way
// (the one holding it keeps it; else the first name).
func AssignEgressIPs(in EgressIPInput) EgressIPResult {
	res := EgressIPResult{Items: map[string][]egressipv1.EgressIPStatusItem{}}
	objs := slices.Clone(in.EgressIPs)
	slices.SortFunc(objs, func(a, b *egressipv1.EgressIP) int { return strings.Compare(a.Name, b.Name) })
	nodes := make([]string, 0, len(in.Nodes))
	for name := range in.Nodes {
		nodes = append(nodes, name)
	}
	slices.Sort(nodes)

	a := &assigner{in: in, nodes: nodes, load: map[string]int{}, owner: map[netip.Addr]string{},
		at: map[string]map[netip.Addr]string{}, wanted: map[string][]netip.Addr{}}
	// Validate, and claim each IP for one object: the one whose status
	// holds it, else the first by name.
	for _, eip := range objs {
		for _, s := range eip.Spec.EgressIPs {
			ip, err := netip.ParseAddr(s)
			switch {
			case err != nil || ip.Zone() != "":
				res.Problems.Add(eip.Name, ReasonEgressIPInvalid, "egress IP %q is not an IPv4 or IPv6 address", s)
				continue
			}
			ip = ipfamily.Canonical(ip)
			if why := (translate.IngressNetworks{}).Refusal(ip, nil); why != "" {
				res.Problems.Add(eip.Name, ReasonEgressIPInvalid, "egress IP %s %s and will not be assigned", ip, why)
				continue
			}
			if why := refusedByNodes(in.Nodes, nodes, ip); why != "" {
				res.Problems.Add(eip.Name, ReasonEgressIPConflict, "egress IP %s %s and will not be assigned", ip, why)
				continue
			}
			if slices.Contains(a.wanted[eip.Name], ip) {
				continue
			}
			a.wanted[eip.Name] = append(a.wanted[eip.Name], ip)
		}
	}
	a.claim(objs, &res)
	// Sticky first: every current assignment still valid is kept (and
	// counted) before any new one is placed.
	for _, eip := range objs {
		for _, it := range eip.Status.Items {
			ip, ok := statusIP(it)
			if !ok {
				continue
			}
			n := in.Nodes[it.Node]
			if a.owner[ip] != eip.Name || n == nil || n.eligible(ip) != "" || a.at[eip.Name][ip] != "" || a.holds(eip.Name, it.Node) {
				continue
			}
			a.place(eip.Name, ip, it.Node)
		}
	}
	for _, eip := range objs {
		for _, ip := range a.wanted[eip.Name] {
			if a.owner[ip] != eip.Name || a.at[eip.Name][ip] != "" {
				continue
			}
			if node, why := a.best(eip.Name, ip); node != "" {
				a.place(eip.Name, ip, node)
			} else {
				res.Problems.Add(eip.Name, ReasonNoMatchingNode, "egress IP %s is unassigned: %s", ip, why)
			}
		}
		var items []egressipv1.EgressIPStatusItem
		for _, ip := range a.wanted[eip.Name] {
			if node := a.at[eip.Name][ip]; node != "" {
				items = append(items, egressipv1.EgressIPStatusItem{Node: node, EgressIP: ip.String()})
			}
		}
		res.Items[eip.Name] = items
	}
	return res
}

// refusedByNodes is the first node's (by name) refusal of ip.
func refusedByNodes(in map[string]*EgressIPNode, names []string, ip netip.Addr) string {
	for _, name := range names {
		if why := in[name].Refusal(ip); why != "" {
			return why
		}
	}
	return ""
}

// assigner is the state of one AssignEgressIPs.
type assigner struct {
	in     EgressIPInput
	nodes  []string                         // sorted
	load   map[string]int                   // IPs held by each node
	owner  map[netip.Addr]string            // the object each IP is claimed for
	at     map[string]map[netip.Addr]string // object → IP → node
	wanted map[string][]netip.Addr          // object → its valid IPs, in spec order
}

// claim gives each IP to one object: the first by name whose status holds
// it on a node, else the first by name that asks for it.
func (a *assigner) claim(objs []*egressipv1.EgressIP, res *EgressIPResult) {
	for _, eip := range objs {
		for _, it := range eip.Status.Items {
			ip, ok := statusIP(it)
			if !ok {
				continue
			}
			if a.owner[ip] == "" && slices.Contains(a.wanted[eip.Name], ip) {
				a.owner[ip] = eip.Name
			}
		}
	}
	for _, eip := range objs {
		for _, ip := range a.wanted[eip.Name] {
			switch o := a.owner[ip]; o {
			case "":
				a.owner[ip] = eip.Name
			case eip.Name:
			default:
				res.Problems.Add(eip.Name, ReasonEgressIPTaken, "egress IP %s is already claimed by EgressIP %s", ip, o)
			}
		}
	}
}

// statusIP is a status item's address, canonical; ok is false when the
// item holds no address.
func statusIP(it egressipv1.EgressIPStatusItem) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(it.EgressIP)
	return ipfamily.Canonical(ip), err == nil
}

func (a *assigner) holds(obj, node string) bool {
	for _, n := range a.at[obj] {
		if n == node {
			return true
		}
	}
	return false
}

// better reports whether node n is a better choice than b: not
// recovering first, then the fewest IPs (names break ties by order).
func (a *assigner) better(n, b string) bool {
	if rn, rb := a.in.Nodes[n].Recovering, a.in.Nodes[b].Recovering; rn != rb {
		return rb
	}
	return a.load[n] < a.load[b]
}

func (a *assigner) place(obj string, ip netip.Addr, node string) {
	if a.at[obj] == nil {
		a.at[obj] = map[netip.Addr]string{}
	}
	a.at[obj][ip] = node
	a.load[node]++
}

// best is the eligible node of fewest IPs (ties by name) that holds no
// other IP of obj, or "" and why none is.
func (a *assigner) best(obj string, ip netip.Addr) (string, string) {
	best := ""
	whys := map[string]int{}
	for _, name := range a.nodes {
		if why := a.in.Nodes[name].eligible(ip); why != "" {
			whys[why]++
			continue
		}
		if a.holds(obj, name) {
			whys["already holds another IP of this EgressIP"]++
			continue
		}
		if best == "" || a.better(name, best) {
			best = name
		}
	}
	if best != "" {
		return best, ""
	}
	if len(a.nodes) == 0 {
		return "", "there are no nodes"
	}
	var parts []string
	for why, n := range whys {
		parts = append(parts, fmt.Sprintf("%d %s", n, why))
	}
	slices.Sort(parts)
	return "", fmt.Sprintf("no node can hold it (%s)", strings.Join(parts, ", "))
}
