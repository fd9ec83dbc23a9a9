package nodeplan

import (
	"cmp"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// ReasonNetworkNotFound: spec.network names a table the node cannot resolve
// (no VRF device of that name, no entry in rt_tables). Nothing is programmed
// for the service on that node and it is not reported as ready there.
const ReasonNetworkNotFound translate.Reason = "NetworkNotFound"

// DefaultRulePriority is the ip rule priority the node agent owns; it is the
// one ovn-kubernetes uses for the same rules (its EgressIP rules use 6000).
const DefaultRulePriority = 5000

// The local-gateway bypass rule: "fwmark 0x3f0 lookup main" at priority
// 5999, as ovn-kubernetes' EgressService node controller installs it since
// its PR #6090 (before, only its EgressIP controller did): the pod-to-node
// traffic OVN marks 1008 (ovn-egress's and ovn-kubernetes' 102 policy, the
// Pod-To-Node mark) goes by the main table on a local-gateway node, so a
// served pod keeps reaching ClusterIPs and node addresses through the host.
// The agent installs it on local-gateway nodes whatever EgressIP does.
const (
	FwMarkRulePriority = 5999
	NodeSNATMark       = 0x3f0
)

// OVNKubeRulePriorities are ip rule priorities ovn-kubernetes owns: its ip
// rule manager deletes every rule it does not know at 2000 (UDN masquerade)
// and 6000 (EgressIP), 6001 is its EgressIP catch-all of the coming traffic
// classes, 5999 its own copy of the bypass rule. The agent's own rules stay
// off them.
var OVNKubeRulePriorities = []int{2000, FwMarkRulePriority, 6000, 6001}

// NodePlanConfig tunes NodePlan.
type NodePlanConfig struct {
	// RulePriority of every ip rule the agent programs.
	RulePriority int
	// ETPLocalMasqueradeIPs are ovn-kubernetes' host ETP=Local masquerade
	// addresses: replies of externalTrafficPolicy=Local node-port traffic
	// leave the host from them, with the node port as source port.
	ETPLocalMasqueradeIPs map[ipfamily.Family]netip.Addr
}

// DefaultNodePlanConfig returns ovn-kubernetes' defaults: priority 5000 and
// masquerade IPs 169.254.169.3 / fd69::3.
func DefaultNodePlanConfig() NodePlanConfig {
	return NodePlanConfig{
		RulePriority: DefaultRulePriority,
		ETPLocalMasqueradeIPs: map[ipfamily.Family]netip.Addr{
			ipfamily.V4: netip.MustParseAddr("169.254.169.3"),
			ipfamily.V6: netip.MustParseAddr("fd69::3"),
		},
	}
}

// NodePlanInput is everything the node plan depends on. Tables carries the
// resolution of network names (VRF device or rt_tables name → table
// number), done by the caller: a network that is a number needs no entry,
// a name without an entry was not found on the node.
type NodePlanInput struct {
	Node           string
	EgressServices []*egressv1.EgressService
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	ClusterSubnets []netip.Prefix
	// NodeSubnets are this node's pod subnets (its node-subnets
	// annotation): an endpoint in them but outside ClusterSubnets is a
	// problem, not skipped silently.
	NodeSubnets []netip.Prefix
	// NodeIPs are every node's addresses (host-cidrs): traffic to them is
	// never SNATed to an LB IP — what ovn-kubernetes' Pod-To-Node mark
	// (pkt_mark=1008) says, without relying on the datapath to carry it.
	NodeIPs []netip.Addr
	Tables  map[string]uint32
	Config  NodePlanConfig
	// LocalGateway: the node runs ovn-kubernetes' local gateway mode (its
	// l3-gateway-config says so): the bypass rule (FwMarkRulePriority) is
	// wanted.
	LocalGateway bool
}

// podSubnet places ip in one of this node's pod subnets.
func (in NodePlanInput) podSubnet(ip netip.Addr) (string, netip.Prefix, bool) {
	for _, p := range in.NodeSubnets {
		if p.Contains(ip) {
			return in.Node, p.Masked(), true
		}
	}
	return "", netip.Prefix{}, false
}

// IPRule is one policy routing rule: "from Src [sport SourcePort] lookup Table".
type IPRule struct {
	Family   ipfamily.Family
	Priority int
	Src      netip.Prefix
	// SourcePort is 0 for "any source port".
	SourcePort uint16
	Table      uint32
}

// String renders the rule the way `ip rule` prints it, with the family first.
func (r IPRule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d: from %s", r.Family, r.Priority, prefixString(r.Src))
	if r.SourcePort != 0 {
		fmt.Fprintf(&b, " sport %d", r.SourcePort)
	}
	fmt.Fprintf(&b, " lookup %d", r.Table)
	return b.String()
}

// Compare orders rules by family, priority, source, source port, table.
func (r IPRule) Compare(o IPRule) int {
	return cmp.Or(
		cmp.Compare(r.Family, o.Family),
		cmp.Compare(r.Priority, o.Priority),
		r.Src.Addr().Compare(o.Src.Addr()),
		cmp.Compare(r.Src.Bits(), o.Src.Bits()),
		cmp.Compare(r.SourcePort, o.SourcePort),
		cmp.Compare(r.Table, o.Table),
	)
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// SNATElement is one element of the family's SNAT map: traffic from
// Endpoint leaves with SNATIP as source. Owner ("namespace/name" of the
// EgressService) is the element's comment.
type SNATElement struct {
	Family   ipfamily.Family
	Endpoint netip.Addr
	SNATIP   netip.Addr
	Owner    string
}

func (e SNATElement) String() string {
	return fmt.Sprintf("%s %s : %s  # %s", e.Family, e.Endpoint, e.SNATIP, e.Owner)
}

// Compare orders elements by family, then endpoint.
func (e SNATElement) Compare(o SNATElement) int {
	return cmp.Or(cmp.Compare(e.Family, o.Family), e.Endpoint.Compare(o.Endpoint),
		e.SNATIP.Compare(o.SNATIP), cmp.Compare(e.Owner, o.Owner))
}

// NodeState is host-side state in the node agent's terms: the ip rules at
// its priority, the SNAT map elements, and the destinations that are never
// SNATed. The plan's desired state and the applier's read-back use it alike.
type NodeState struct {
	Rules []IPRule
	SNAT  []SNATElement
	// NoSNAT are destinations whose traffic keeps the pod source even when
	// the source is in a SNAT map: the cluster subnets (traffic back into
	// the cluster).
	NoSNAT []netip.Prefix
	// NodeIPs are destinations the SNAT map leaves alone too: every node's
	// addresses (the node's own NAT, a masquerade in local gateway mode,
	// gives that traffic the node's address, as ovn-kubernetes' Pod-To-Node
	// mark asks).
	NodeIPs []netip.Addr
	// BypassRule: the local-gateway bypass rule, "fwmark NodeSNATMark
	// lookup main" at FwMarkRulePriority, in both families.
	BypassRule bool
}

// Normalize sorts and de-duplicates the state in place and returns it.
func (s NodeState) Normalize() NodeState {
	slices.SortFunc(s.Rules, IPRule.Compare)
	s.Rules = slices.Compact(s.Rules)
	slices.SortFunc(s.SNAT, SNATElement.Compare)
	s.SNAT = slices.Compact(s.SNAT)
	slices.SortFunc(s.NoSNAT, comparePrefix)
	s.NoSNAT = slices.Compact(s.NoSNAT)
	slices.SortFunc(s.NodeIPs, netip.Addr.Compare)
	s.NodeIPs = slices.Compact(s.NodeIPs)
	return s
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// NodeServicePlan is what one EgressService needs on the node.
type NodeServicePlan struct {
	Key    string
	Rules  []IPRule
	SNAT   []SNATElement
	Report translate.ServiceReport
}

// NodePlanOutput is the node plan: the desired state, per service what it
// needs, the report to publish once everything is applied, and problems.
type NodePlanOutput struct {
	Desired  NodeState
	Services []NodeServicePlan
	Problems translate.Problems
}

// Report returns the readiness report of the plan as if all of it were
// applied.
func (o NodePlanOutput) Report() translate.Report { return o.ReportReached(o.Desired) }

// ReportReached returns the readiness report for the state the applier
// reached: only services whose every rule and SNAT element is in reached.
func (o NodePlanOutput) ReportReached(reached NodeState) translate.Report {
	rules := make(map[IPRule]bool, len(reached.Rules))
	for _, r := range reached.Rules {
		rules[r] = true
	}
	snat := make(map[SNATElement]bool, len(reached.SNAT))
	for _, e := range reached.SNAT {
		snat[e] = true
	}
	r := translate.Report{}
	for _, s := range o.Services {
		ok := true
		for _, x := range s.Rules {
			ok = ok && rules[x]
		}
		for _, x := range s.SNAT {
			ok = ok && snat[x]
		}
		if ok {
			r[s.Key] = s.Report
		}
	}
	return r
}

// NetworkTable interprets spec.network: a decimal number is a routing table
// id (numeric=true; 0 and numbers beyond 32 bits are an error); anything
// else is a name the node must resolve (numeric=false).
func NetworkTable(network string) (table uint32, numeric bool, err error) {
	if network == "" || strings.TrimLeft(network, "0123456789") != "" {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(network, 10, 32)
	if err != nil || n == 0 {
		return 0, true, fmt.Errorf("network %q is not a routing table id (1..4294967295)", network)
	}
	return uint32(n), true, nil
}

// HostedOn reports whether the node agent on node programs es: its
// status.host is the node, or ALL.
func HostedOn(es *egressv1.EgressService, node string) bool {
	return es != nil && (es.Status.Host == node || es.Status.Host == translate.HostAll)
}

// NodeNetworkNames returns the network names (not numbers) of the
// EgressServices hosted on node, sorted and unique: the names the caller
// resolves into NodePlanInput.Tables.
func NodeNetworkNames(node string, ess []*egressv1.EgressService) []string {
	var out []string
	for _, es := range ess {
		if !HostedOn(es, node) {
			continue
		}
		if _, numeric, _ := NetworkTable(es.Spec.Network); !numeric && es.Spec.Network != "" {
			out = append(out, es.Spec.Network)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// nodeCandidate is a hosted, configurable service before endpoint claims.
type nodeCandidate struct {
	key     string
	es      *egressv1.EgressService
	svc     *corev1.Service
	ingress map[ipfamily.Family]netip.Addr
	table   uint32 // 0: no spec.network
	// eps are AgentEndpoints before shared-endpoint claims.
	eps []netip.Addr
}

// NodePlan computes what the node agent on in.Node programs. For each
// EgressService whose status.host is the node or ALL, whose Service is a
// LoadBalancer with at least one ingress IP:
//
//   - endpoints: ServiceEndpoints (cluster-networked only, so host-networked
//     endpoints are never configured) narrowed by AgentEndpoints (for ALL:
//     this node's; otherwise those of a family with an ingress IP);
//   - SNAT (status.host is this node and sourceIPBy is not Network): one map
//     element per endpoint → the ingress IP of its family;
//   - spec.network set: "from <endpoint>" and "from <ClusterIP>" rules into
//     the network's table, and for externalTrafficPolicy=Local one
//     "from <masquerade IP> sport <nodePort>" rule per node port and per
//     family that has an ingress IP;
//   - a network that is not a valid number and not in in.Tables: nothing for
//     that service, and a NetworkNotFound (or InvalidNetwork) problem.
//
// Shared endpoints: one pod IP can have one SNAT address and one table, so
// when it backs two EgressServices programmed on this node the lexically
// first "namespace/name" keeps it and every other service gets a
// SharedEndpoint problem and is programmed without it. The master applies
// the same rule (over all services, so it never reroutes an address for a
// service that lost it here) and leaves the address out of the loser's
// reroute set.
//
// Every service that is programmed gets a report entry in the format the
// master compares (report.go): ips are ReportIPs of the Service's ingress
// IPs when the node SNATs (none for ALL or Network), network is
// spec.network, eps is EndpointsHash(AgentEndpoints(...)) of the Service's
// endpoints — before shared-endpoint claims, exactly as the master computes
// it; the hash says which endpoint state the agent has caught up with.
// NoSNAT is the cluster subnets: traffic to them keeps the pod source.
func NodePlan(in NodePlanInput) NodePlanOutput {
	var out NodePlanOutput
	svcs := map[string]*corev1.Service{}
	for _, s := range in.Services {
		if s != nil {
			svcs[s.Namespace+"/"+s.Name] = s
		}
	}
	byService := slicesByService(in.EndpointSlices)
	var cands []nodeCandidate
	var nodeIPs map[netip.Addr]bool // built when first needed
	ess := slices.Clone(in.EgressServices)
	slices.SortFunc(ess, func(a, b *egressv1.EgressService) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	for _, es := range ess {
		if !HostedOn(es, in.Node) {
			continue
		}
		key := es.Namespace + "/" + es.Name
		svc := svcs[key]
		if !translate.IsLoadBalancer(svc) {
			continue
		}
		ingress, _ := translate.IngressIPs(svc)
		if len(ingress) == 0 {
			continue
		}
		if es.Status.Host != egressv1.HostAll && refuseIngress(key, ingress, in, &nodeIPs, &out.Problems) {
			continue
		}
		table, ok := nodeTable(key, es.Spec.Network, in, &out.Problems)
		if !ok {
			continue
		}
		eps := translate.ServiceEndpoints(svc, byService[key], in.ClusterSubnets)
		for _, m := range translate.MisplacedEndpoints(svc, byService[key], in.ClusterSubnets, in.podSubnet) {
			out.Problems.Add(key, translate.ReasonEndpointOutsideClusterSubnets, "%s", m.Message(in.ClusterSubnets))
		}
		cands = append(cands, nodeCandidate{key: key, es: es, svc: svc, ingress: ingress, table: table,
			eps: translate.AgentEndpoints(es.Status.Host, in.Node, eps, ingress)})
	}
	claims := make([]EndpointClaim, 0, len(cands))
	for _, c := range cands {
		claims = append(claims, EndpointClaim{Key: c.key, IPs: c.eps})
	}
	kept, lost := ClaimEndpoints(claims)
	for _, l := range lost {
		out.Problems.Add(l.Key, translate.ReasonSharedEndpoint,
			"endpoint %s also backs %s, which keeps it on node %s; it is not programmed for this service",
			l.IP, l.Winner, in.Node)
	}
	for _, c := range cands {
		sp := nodeServicePlan(c, kept[c.key], in)
		out.Desired.Rules = append(out.Desired.Rules, sp.Rules...)
		out.Desired.SNAT = append(out.Desired.SNAT, sp.SNAT...)
		out.Services = append(out.Services, sp)
	}
	out.Desired.NoSNAT = append(out.Desired.NoSNAT, in.ClusterSubnets...)
	out.Desired.NodeIPs = append(out.Desired.NodeIPs, in.NodeIPs...)
	out.Desired.BypassRule = in.LocalGateway
	for i := range out.Desired.NoSNAT {
		out.Desired.NoSNAT[i] = out.Desired.NoSNAT[i].Masked()
	}
	out.Desired = out.Desired.Normalize()
	slices.SortStableFunc(out.Problems, func(a, b translate.Problem) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// nodeTable resolves spec.network: 0 for none; ok=false (and a problem)
// when the service must not be programmed.
func nodeTable(key, network string, in NodePlanInput, ps *translate.Problems) (uint32, bool) {
	if network == "" {
		return 0, true
	}
	table, numeric, err := NetworkTable(network)
	if numeric {
		if err != nil {
			ps.Add(key, translate.ReasonInvalidNetwork, "node %s: %v", in.Node, err)
			return 0, false
		}
		return table, true
	}
	if t, ok := in.Tables[network]; ok && t != 0 {
		return t, true
	}
	ps.Add(key, ReasonNetworkNotFound,
		"node %s: network %q is neither a VRF device nor a routing table name there; nothing is programmed for this service on the node",
		in.Node, network)
	return 0, false
}

func nodeServicePlan(c nodeCandidate, eps []netip.Addr, in NodePlanInput) NodeServicePlan {
	sp := NodeServicePlan{Key: c.key}
	prio := in.Config.RulePriority
	snat := c.es.Status.Host == in.Node && c.es.Spec.SourceIPBy != egressv1.Network
	for _, ip := range eps {
		f := ipfamily.Of(ip)
		if lb, ok := c.ingress[f]; ok && snat {
			sp.SNAT = append(sp.SNAT, SNATElement{Family: f, Endpoint: ip, SNATIP: lb, Owner: c.key})
		}
		if c.table != 0 {
			sp.Rules = append(sp.Rules, hostRule(ip, 0, prio, c.table))
		}
	}
	if c.table != 0 {
		for _, ip := range translate.ClusterIPs(c.svc) {
			sp.Rules = append(sp.Rules, hostRule(ip, 0, prio, c.table))
		}
		if translate.ETPLocal(c.svc) {
			for _, f := range ipfamily.All {
				masq, ok := in.Config.ETPLocalMasqueradeIPs[f]
				if _, hasIngress := c.ingress[f]; !ok || !hasIngress {
					continue
				}
				for _, p := range c.svc.Spec.Ports {
					if p.NodePort > 0 && p.NodePort <= 65535 {
						sp.Rules = append(sp.Rules, hostRule(masq, uint16(p.NodePort), prio, c.table))
					}
				}
			}
		}
	}
	st := NodeState{Rules: sp.Rules, SNAT: sp.SNAT}.Normalize()
	sp.Rules, sp.SNAT = st.Rules, st.SNAT
	sp.Report = translate.ServiceReport{Network: c.es.Spec.Network, Endpoints: translate.EndpointsHash(c.eps)}
	if snat {
		sp.Report.IngressIPs = translate.ReportIPs(c.ingress)
	}
	return sp
}

func hostRule(ip netip.Addr, sport uint16, prio int, table uint32) IPRule {
	ip = ipfamily.Canonical(ip)
	return IPRule{Family: ipfamily.Of(ip), Priority: prio, Src: netip.PrefixFrom(ip, ip.BitLen()),
		SourcePort: sport, Table: table}
}

// slicesByService groups EndpointSlices by "namespace/<service name>".
func slicesByService(all []*discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	m := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range all {
		if s == nil {
			continue
		}
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			k := s.Namespace + "/" + name
			m[k] = append(m[k], s)
		}
	}
	return m
}

// EndpointClaim is the endpoint addresses one EgressService wants
// programmed on one host node.
type EndpointClaim struct {
	Key string
	IPs []netip.Addr
}

// SharedEndpoint is an address a service lost to Winner.
type SharedEndpoint struct {
	IP     netip.Addr
	Key    string
	Winner string
}

// ClaimEndpoints settles addresses wanted by more than one EgressService on
// one node: the lexically first key keeps the address, the others lose it.
// It returns, per key, the addresses it keeps (sorted), and every loss
// ordered by key then address. The master's NB translation settles
// conflicts by the same rule (lexically first key wins).
func ClaimEndpoints(claims []EndpointClaim) (kept map[string][]netip.Addr, lost []SharedEndpoint) {
	sorted := slices.Clone(claims)
	slices.SortStableFunc(sorted, func(a, b EndpointClaim) int { return cmp.Compare(a.Key, b.Key) })
	owner := map[netip.Addr]string{}
	kept = make(map[string][]netip.Addr, len(claims))
	for _, c := range sorted {
		ips := make([]netip.Addr, 0, len(c.IPs))
		for _, ip := range c.IPs {
			ip = ipfamily.Canonical(ip)
			if w, taken := owner[ip]; taken && w != c.Key {
				lost = append(lost, SharedEndpoint{IP: ip, Key: c.Key, Winner: w})
				continue
			}
			owner[ip] = c.Key
			ips = append(ips, ip)
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		kept[c.Key] = append(kept[c.Key], slices.Compact(ips)...)
	}
	slices.SortFunc(lost, func(a, b SharedEndpoint) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), a.IP.Compare(b.IP))
	})
	return kept, lost
}

// refuseIngress reports (as a problem of key) whether a hosted service's
// ingress IP is one no pod may leave with: the agent never SNATs to a
// node's own address or one inside the cluster subnets, whoever wrote
// status.host.
func refuseIngress(key string, ingress map[ipfamily.Family]netip.Addr, in NodePlanInput, nodeIPs *map[netip.Addr]bool, ps *translate.Problems) bool {
	if *nodeIPs == nil {
		*nodeIPs = make(map[netip.Addr]bool, len(in.NodeIPs))
		for _, ip := range in.NodeIPs {
			(*nodeIPs)[ip] = true
		}
	}
	nets := translate.IngressNetworks{ClusterSubnets: in.ClusterSubnets}
	for _, f := range ipfamily.All {
		if ip, ok := ingress[f]; ok {
			if why := nets.Refusal(ip, nil); why != "" {
				ps.Add(key, translate.ReasonInvalidIngressIP, "load-balancer ingress IP %s %s: not programmed on node %s", ip, why, in.Node)
				return true
			}
			if (*nodeIPs)[ip] {
				ps.Add(key, translate.ReasonInvalidIngressIP, "load-balancer ingress IP %s is a node's own address: not programmed on node %s", ip, in.Node)
				return true
			}
		}
	}
	return false
}
