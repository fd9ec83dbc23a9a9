package egressip

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"
	"strings"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The NB rows of EgressIP (docs/egressip.md), shaped to scale with egress
// nodes instead of pods: per (object, family) one address set of the
// selected pods, one reroute policy with every assigned node as an ECMP
// next hop and the allow policies EgressService has (cluster, join, service
// and node destinations keep the pod's address); on each assigned node's
// gateway router the SNAT to the IP — with NAT.match (OVN ≥ 24.09) one row
// matching the set, without it one row per pod, as ovn-kubernetes writes.

// NATEgressIPPriority is the priority of an EgressIP's SNAT row with a match
// (Config.NATMatch): above a gateway router's default SNAT (no match) and
// below an EgressService's rows (NATServicePriority), which win for a pod
// both select.
const NATEgressIPPriority = 5

// EgressIPPortRange is the source-port range of an EgressIP's SNAT rows, as
// ovn-kubernetes writes them: the egress IP's connections stay clear of the
// ports below (NodePorts and the host's own services).
const EgressIPPortRange = "32768-60999"

// EgressIPReroutePriority is the priority of an EgressIP's reroute policy:
// below EgressService's (Config.ReroutePriority, 101), which wins for a pod
// both select, as in ovn-kubernetes.
const EgressIPReroutePriority = 100

// Reasons reported for an EgressIP's rows.
const (
	// ReasonPodSelectedTwice: a pod another EgressIP selects first (by name)
	// leaves through that one only.
	ReasonPodSelectedTwice translate.Reason = "PodSelectedByAnotherEgressIP"
	// ReasonEgressNodeUnusable: an assigned node without the gateway
	// router join address the reroute needs.
	ReasonEgressNodeUnusable translate.Reason = "EgressNodeUnusable"
)

// EgressIPRowsInput is what the rows of EgressIPs are computed from.
type EgressIPRowsInput struct {
	Config translate.Config
	// Zone, when set, computes the rows of that interconnect zone only (its
	// own NB, as Input.Zone): the reroutes of the pods running in it
	// (LocalPods), to the gateway router of an assigned node in the zone and
	// to the transit-switch address of one elsewhere, and the SNATs of the
	// assigned nodes in the zone, for every selected pod (the others' packets
	// arrive over the transit switch). Empty: one central NB.
	Zone string
	// LocalPods are, with a Zone, the addresses of the pods running on the
	// zone's nodes (ZonePodAddresses).
	LocalPods map[netip.Addr]bool
	// Objects are the EgressIPs with their selected pods; status.items are
	// the assignment.
	Objects []EgressIPObject
	// Nodes give the assigned nodes' gateway router join addresses.
	Nodes map[string]*translate.NodeInfo
	// Served are the endpoint addresses EgressServices reroute (at a higher
	// priority): without NAT.match they get no per-pod EgressIP SNAT row, so
	// that a gateway router never holds two snat rows for one address.
	Served map[netip.Addr]bool
}

// EgressIPObject is one EgressIP and the pods it selects.
type EgressIPObject struct {
	EgressIP *egressipv1.EgressIP
	Pods     EgressIPPods
}

// TranslateEgressIPs computes the rows of every object (pure), under their
// EgressIPKey; the problems are keyed by object name, as the assignment's.
func TranslateEgressIPs(in EgressIPRowsInput) *translate.Desired {
	out := &translate.Desired{Rows: map[translate.Key]*translate.Rows{}}
	objs := slices.Clone(in.Objects)
	slices.SortFunc(objs, func(a, b EgressIPObject) int { return strings.Compare(a.EgressIP.Name, b.EgressIP.Name) })
	owner := map[netip.Addr]string{} // a pod leaves through the first object by name
	for _, o := range objs {
		name := o.EgressIP.Name
		r := &translate.Rows{}
		for _, f := range in.Config.Families() {
			pods := claimPods(o.Pods[f], name, owner, &out.Problems)
			hops, nats := egressNodes(in, o.EgressIP, f, &out.Problems)
			if len(pods) == 0 || len(hops) == 0 {
				continue // nothing to reroute in this family: the pods keep their node's SNAT
			}
			ids := translate.OwnerIDs(translate.OwnerEgressIP, name, f)
			set := translate.AddressSetName(ids[translate.KeyID])
			if local := in.local(pods); len(local) > 0 {
				r.AddressSets = append(r.AddressSets, translate.AddressSet{Name: set, Addresses: translate.FormatAddrs(local), ExternalIDs: ids})
				r.Policies = append(r.Policies, egressIPPolicies(in.Config, name, f, set, hops)...)
			} else {
				set = ""
			}
			if len(nats) > 0 && in.Zone != "" && in.Config.NATMatch {
				// Pods of other zones arrive over the transit switch: the SNAT
				// matches a set of every selected pod, the reroute only the local ones.
				nids := translate.OwnerIDs(translate.OwnerEgressIPNAT, name, f)
				set = translate.AddressSetName(nids[translate.KeyID])
				r.AddressSets = append(r.AddressSets, translate.AddressSet{Name: set, Addresses: translate.FormatAddrs(pods), ExternalIDs: nids})
			}
			for _, n := range nats {
				r.NATs = append(r.NATs, egressIPNATs(in, name, f, set, pods, n)...)
			}
		}
		if r.Len() > 0 {
			r.Sort()
			out.Rows[translate.EgressIPKey(name)] = r
		}
	}
	return out
}

// claimPods returns the pods of one object and family that no object before
// it (by name) selects, recording the others as a problem.
func claimPods(pods []netip.Addr, name string, owner map[netip.Addr]string, problems *translate.Problems) []netip.Addr {
	out := make([]netip.Addr, 0, len(pods))
	var taken []string
	for _, p := range pods {
		if first, ok := owner[p]; ok && first != name {
			taken = append(taken, fmt.Sprintf("%s (%s)", p, first))
			continue
		}
		owner[p] = name
		out = append(out, p)
	}
	if len(taken) > 0 {
		problems.Add(name, ReasonPodSelectedTwice, "%d pod address(es) leave through the EgressIP that selects them first by name: %s",
			len(taken), strings.Join(taken, ", "))
	}
	return out
}

// egressNAT is one assigned (node, IP) of a family.
type egressNAT struct {
	node string
	ip   netip.Addr
}

// egressNodes returns the reroute next hops of an object in family f and
// the (node, IP) pairs whose gateway routers SNAT in this zone. A next hop is
// an assigned node's GR join address — or, in another interconnect zone, its
// transit-switch address — sorted. A node without the address is a problem
// and takes no traffic.
func egressNodes(in EgressIPRowsInput, eip *egressipv1.EgressIP, f ipfamily.Family, problems *translate.Problems) ([]string, []egressNAT) {
	var hops []string
	var nats []egressNAT
	for _, it := range eip.Status.Items {
		ip, ok := statusIP(it)
		if !ok || ipfamily.Of(ip) != f {
			continue
		}
		n := in.Nodes[it.Node]
		local := n != nil && (in.Zone == "" || n.ZoneName() == in.Zone)
		hop, ok := netip.Addr{}, false
		switch {
		case n == nil:
		case local:
			hop, ok = n.JoinIPs[f]
		default:
			hop, ok = n.TransitIPs[f]
		}
		if !ok {
			if n != nil && !local {
				problems.Add(eip.Name, translate.ReasonTransitAddressMissing, "%s is assigned to node %s in zone %s, which has no %s address in %s: zone %s does not reroute to it",
					ip, it.Node, n.ZoneName(), f.Name(), translate.AnnotTransitIfAddr, in.Zone)
				continue
			}
			problems.Add(eip.Name, ReasonEgressNodeUnusable, "%s is assigned to node %s, which has no %s gateway router join address (k8s.ovn.org/node-gateway-router-lrp-ifaddrs): it carries no traffic",
				ip, it.Node, f.Name())
			continue
		}
		hops = append(hops, hop.String())
		if local {
			nats = append(nats, egressNAT{node: it.Node, ip: ip})
		}
	}
	slices.Sort(hops)
	hops = slices.Compact(hops)
	slices.SortFunc(nats, func(a, b egressNAT) int { return strings.Compare(a.node, b.node) })
	return hops, nats
}

// local returns the pods whose reroute this zone writes: every pod on a
// central NB, those running in the zone (LocalPods) in interconnect.
func (in EgressIPRowsInput) local(pods []netip.Addr) []netip.Addr {
	if in.Zone == "" {
		return pods
	}
	out := make([]netip.Addr, 0, len(pods))
	for _, p := range pods {
		if in.LocalPods[p] {
			out = append(out, p)
		}
	}
	return out
}

// egressIPPolicies are an object's policies on ovn_cluster_router for the
// pods of set: the reroute to hops, and the allow policies that keep the
// pods' addresses towards the cluster, join, service and node addresses.
func egressIPPolicies(cfg translate.Config, name string, f ipfamily.Family, set string, hops []string) []translate.Policy {
	src := fmt.Sprintf("%s.src == $%s", f.OVNMatch(), set)
	return []translate.Policy{
		{Router: translate.ClusterRouter, Priority: EgressIPReroutePriority, Match: src, Action: translate.ActionReroute,
			Nexthops: hops, ExternalIDs: translate.OwnerIDs(translate.OwnerEgressIP, name, f, translate.ActionReroute)},
		{Router: translate.ClusterRouter, Priority: cfg.AllowPriority, Match: src + " && " + translate.AllowDestinations(cfg, f),
			Action: translate.ActionAllow, ExternalIDs: translate.OwnerIDs(translate.OwnerEgressIP, name, f, translate.ActionAllow)},
		{Router: translate.ClusterRouter, Priority: cfg.AllowPriority,
			Match:  fmt.Sprintf("%s && %s.dst == $%s", src, f.OVNMatch(), translate.NodeIPsSetName(f)),
			Action: translate.ActionAllow, Options: map[string]string{"pkt_mark": translate.PodToNodeMark},
			ExternalIDs: translate.OwnerIDs(translate.OwnerEgressIP, name, f, translate.ActionAllowNode)},
	}
}

// egressIPNATs are the SNAT rows of one assigned (node, IP) on the node's
// gateway router.
func egressIPNATs(in EgressIPRowsInput, name string, f ipfamily.Family, set string, pods []netip.Addr, n egressNAT) []translate.NAT {
	gr := translate.GatewayRouter(n.node)
	if in.Config.NATMatch {
		return []translate.NAT{{Router: gr, Type: "snat", ExternalIP: n.ip.String(), LogicalIP: f.Any().String(),
			Match: fmt.Sprintf("%s.src == $%s", f.OVNMatch(), set), Priority: NATEgressIPPriority, ExternalPortRange: EgressIPPortRange,
			ExternalIDs: translate.OwnerIDs(translate.OwnerEgressIPNAT, name, f, n.node)}}
	}
	out := make([]translate.NAT, 0, len(pods))
	for _, p := range pods {
		if in.Served[p] {
			continue // an EgressService's endpoint: its own row on its host
		}
		out = append(out, translate.NAT{Router: gr, Type: "snat", ExternalIP: n.ip.String(), LogicalIP: p.String(), ExternalPortRange: EgressIPPortRange,
			ExternalIDs: translate.OwnerIDs(translate.OwnerEgressIPNAT, name, f, n.node, p.String())})
	}
	return out
}
