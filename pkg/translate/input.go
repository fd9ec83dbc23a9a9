package translate

import (
	"fmt"
	"k8s.io/apimachinery/pkg/api/equality"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// Backend says where the SNAT to the load-balancer IP happens.
type Backend string

const (
	// BackendHost (the default): the node agent SNATs on the host; NB only
	// reroutes to the host's management port.
	BackendHost Backend = "host"
	// BackendOVN: snat NAT rows on the host's gateway router; no agent needed.
	BackendOVN Backend = "ovn"
)

// UnassignedTraffic says what happens to the traffic of endpoints without
// a working host (--unassigned-traffic).
type UnassignedTraffic string

// Unassigned traffic policies.
const (
	// UnassignedAllow: it leaves as usual, with its node's address.
	UnassignedAllow UnassignedTraffic = "allow"
	// UnassignedDrop: it is dropped (fail closed).
	UnassignedDrop UnassignedTraffic = "drop"
)

// Config holds the cluster facts and knobs translation depends on.
type Config struct {
	ClusterSubnets []netip.Prefix
	JoinSubnets    []netip.Prefix
	ServiceCIDRs   []netip.Prefix
	// ReroutePriority is the priority of reroute (and drop) policies (101).
	ReroutePriority int
	// AllowPriority is the priority of the allow policies that keep traffic
	// to the cluster, join, service and node networks from being rerouted (102).
	AllowPriority int
	Backend       Backend
	// UnassignedTraffic is what happens to the traffic of endpoints
	// without a working host.
	UnassignedTraffic UnassignedTraffic
	// AssumeAgentsReady treats every node agent as having reported every
	// service (offline translation).
	AssumeAgentsReady bool
	// NATMatch: the NB has NAT.match and NAT.priority (NB schema 7.4 and
	// later, OVN ≥ 24.09). The gateway path then writes one NAT row per
	// (service, family) matching an address set of the service's endpoints,
	// and on each host's GR a row that keeps the node's own SNAT for the
	// served endpoints' traffic to node addresses. Without it: one NAT row
	// per endpoint, and a pod on the host node reaches node addresses with
	// the LB IP.
	NATMatch bool
}

// DefaultConfig returns ovn-kubernetes' defaults: cluster 10.244.0.0/16,
// join 100.64.0.0/16 and fd98::/64, services 10.96.0.0/16, priorities 101/102.
func DefaultConfig() Config {
	return Config{
		ClusterSubnets:    []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		JoinSubnets:       []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16"), netip.MustParsePrefix("fd98::/64")},
		ServiceCIDRs:      []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		ReroutePriority:   101,
		AllowPriority:     102,
		Backend:           BackendHost,
		UnassignedTraffic: UnassignedAllow,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if len(c.ClusterSubnets) == 0 {
		return fmt.Errorf("no cluster subnets")
	}
	for _, p := range [][]netip.Prefix{c.ClusterSubnets, c.JoinSubnets, c.ServiceCIDRs} {
		for _, s := range p {
			if !s.IsValid() {
				return fmt.Errorf("invalid subnet %v", s)
			}
		}
	}
	if c.ReroutePriority < 0 || c.ReroutePriority > 32767 || c.AllowPriority < 0 || c.AllowPriority > 32767 {
		return fmt.Errorf("policy priorities must be within 0..32767")
	}
	if c.AllowPriority <= c.ReroutePriority {
		return fmt.Errorf("allow priority (%d) must be above the reroute priority (%d)", c.AllowPriority, c.ReroutePriority)
	}
	if c.Backend != BackendHost && c.Backend != BackendOVN {
		return fmt.Errorf("unknown SNAT backend %q (want host or ovn)", c.Backend)
	}
	if c.UnassignedTraffic != UnassignedAllow && c.UnassignedTraffic != UnassignedDrop {
		return fmt.Errorf("unknown unassigned-traffic policy %q (want allow or drop)", c.UnassignedTraffic)
	}
	return nil
}

// Families are the IP families of the cluster subnets, in ipfamily.All order.
func (c Config) Families() []ipfamily.Family {
	var out []ipfamily.Family
	for _, f := range ipfamily.All {
		for _, s := range c.ClusterSubnets {
			if ipfamily.OfPrefix(s) == f {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// GatewayInfo are the facts about a node's gateway router read from NB.
type GatewayInfo struct {
	// JoinIPs are the addresses of port rtoj-GR_<node>.
	JoinIPs map[ipfamily.Family]netip.Addr
	// NATAddressesRouter is true when the GR's external switch port has
	// options:nat-addresses=router (moved SNAT addresses get announced).
	NATAddressesRouter bool
	// ExternalPortKnown is false when no etor-GR_<node> port was found.
	ExternalPortKnown bool
	// SNAT is, per family, the GR's own SNAT of the cluster subnets (a row
	// ovn-egress does not own, logical_ip a cluster subnet): what the node's
	// pods leave with when nothing reroutes them.
	SNAT map[ipfamily.Family]GatewaySNAT
}

// GatewaySNAT is one SNAT of a GR: the address and the external port range.
type GatewaySNAT struct {
	ExternalIP netip.Addr
	PortRange  string
}

// Input is everything one translation reads.
type Input struct {
	Config         Config
	EgressServices []*egressv1.EgressService
	// Services by "namespace/name".
	Services map[string]*corev1.Service
	// EndpointSlices by the "namespace/name" of their Service.
	EndpointSlices map[string][]*discoveryv1.EndpointSlice
	// Nodes by name.
	Nodes map[string]*NodeInfo
	// Gateways by node name, read from NB; a node without an entry falls back
	// to the join IPs of its annotations.
	Gateways map[string]GatewayInfo
	// Current holds the addresses of ovn-egress's address sets as NB has them
	// now, by address-set name. A service whose agent report is behind keeps
	// its endpoints that are already there, and gains new ones only once the
	// report catches up.
	Current map[string][]string
	// Zone, when set, computes the rows of that interconnect zone only (its
	// own NB): the nodes whose zone (k8s.ovn.org/zone-name, else the node's
	// own name) is Zone. Empty: one central NB holding every node.
	Zone string
	// ForeignClusterRoutes are the cluster subnets that already have a src-ip
	// route on ovn_cluster_router written by someone else (ovn-kubernetes'
	// egress features): the zone translation does not add its own then.
	ForeignClusterRoutes map[netip.Prefix]bool
	// EgressNodes are the nodes holding an EgressIP's IP (its status.items).
	// In interconnect the zone of such a node routes the cluster's pod
	// traffic to its GR as it does for a host (the selected pods of other
	// zones arrive over the transit switch); EgressIP rows are translated
	// apart (TranslateEgressIPs), this route is the only row they share.
	EgressNodes map[string]bool
	// ClusterRouteShared: ovn-kubernetes' EgressIP may be active in this
	// zone (its allow policies exist). It then keeps the cluster src-ip
	// route of every local node itself, and adopts an existing one as its
	// own: ovn-egress hands a route it no longer wants over
	// (Desired.ReleaseClusterRoutes) instead of deleting a route
	// ovn-kubernetes relies on, and adds one only where none exists.
	ClusterRouteShared bool
}

// EgressServiceKey is "namespace/name".
func EgressServiceKey(es *egressv1.EgressService) string { return es.Namespace + "/" + es.Name }

// ConditionsOnly reports whether an update of an EgressService changed
// nothing but its status.conditions (and so its resourceVersion and
// managedFields): the master's status controller writing what it found,
// which nothing that translates or programs the service reads.
func ConditionsOnly(old, cur *egressv1.EgressService) bool {
	if old == nil || cur == nil {
		return false
	}
	a, b := *old, *cur
	a.ResourceVersion, b.ResourceVersion = "", ""
	a.ManagedFields, b.ManagedFields = nil, nil
	a.Status.Conditions, b.Status.Conditions = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}

func SortedEgressServices(in []*egressv1.EgressService) []*egressv1.EgressService {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b *egressv1.EgressService) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Objects are cluster objects as lists, e.g. read from manifests or the API.
type Objects struct {
	EgressServices []*egressv1.EgressService
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Nodes          []*corev1.Node
	// Reports are the node agents' report ConfigMaps (ReportLabel).
	Reports []*corev1.ConfigMap
}

// InputFromObjects indexes the objects the way Translate reads them.
func InputFromObjects(cfg Config, objs Objects) Input {
	in := Input{Config: cfg, EgressServices: objs.EgressServices, Services: map[string]*corev1.Service{},
		EndpointSlices: map[string][]*discoveryv1.EndpointSlice{}, Nodes: map[string]*NodeInfo{}, Current: map[string][]string{}}
	for _, s := range objs.Services {
		in.Services[s.Namespace+"/"+s.Name] = s
	}
	for _, s := range objs.EndpointSlices {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			key := s.Namespace + "/" + name
			in.EndpointSlices[key] = append(in.EndpointSlices[key], s)
		}
	}
	reports := map[string][]*corev1.ConfigMap{}
	for _, cm := range objs.Reports {
		reports[cm.Data[ReportNodeKey]] = append(reports[cm.Data[ReportNodeKey]], cm)
	}
	for _, n := range objs.Nodes {
		in.Nodes[n.Name] = WithReports(ParseNode(n, cfg.JoinSubnets), reports[n.Name])
	}
	return in
}

// AllKeys returns every key the input can have rows under: the cluster and
// unassigned keys and one per node.
func (in Input) AllKeys() []Key {
	keys := []Key{ClusterKey, UnassignedKey}
	names := make([]string, 0, len(in.Nodes))
	for n := range in.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		keys = append(keys, NodeKey(n))
	}
	return keys
}
