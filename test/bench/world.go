package main

import (
	"encoding/binary"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"math/bits"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// size is the scale of a run: services × endpoints per service on nodes,
// or, with a Mix, endpoints per service as the mix deals them.
type size struct {
	Services  int `json:"services"`
	Endpoints int `json:"endpoints_per_service"`
	Nodes     int `json:"nodes"`
	// Mix names a distribution of endpoints over the services instead of
	// Endpoints each (mixEnvelope); Endpoints is then 0.
	Mix string `json:"endpoint_mix,omitempty"`
}

// mixEnvelope is the Kubernetes scalability envelope's mix (issue 18): most
// services small, some with hundreds of endpoints, as real clusters are.
// Of every 100 services, one has 600 endpoints, nine have 50 and 90 have 5:
// 10,000 services hold 150,000 endpoints.
const mixEnvelope = "envelope"

// endpointsOf is how many endpoints service s has.
func (s size) endpointsOf(svc int) int {
	if s.Mix != mixEnvelope {
		return s.Endpoints
	}
	switch {
	case svc%100 == 0:
		return 600
	case svc%10 == 0:
		return 50
	}
	return 5
}

// total is the number of endpoints of every service.
func (s size) total() int {
	if s.Mix == "" {
		return s.Services * s.Endpoints
	}
	n := 0
	for svc := 0; svc < s.Services; svc++ {
		n += s.endpointsOf(svc)
	}
	return n
}

// defaultSize is the size DESIGN §6 states its targets for.
var defaultSize = size{Services: 10000, Endpoints: 4, Nodes: 50}

// envelopeSize is Kubernetes' scalability envelope (issue 18 item 1):
// 10,000 services and 150,000 endpoints on 5,000 nodes.
var envelopeSize = size{Services: 10000, Nodes: 5000, Mix: mixEnvelope}

func (s size) String() string {
	if s.Mix != "" {
		return fmt.Sprintf("%d services × %s endpoints (%d in all) on %d nodes", s.Services, s.Mix, s.total(), s.Nodes)
	}
	return fmt.Sprintf("%d services × %d endpoints on %d nodes", s.Services, s.Endpoints, s.Nodes)
}

// sliceSize is the most endpoints one EndpointSlice holds, as Kubernetes'
// EndpointSlice controller cuts them (--max-endpoints-per-slice).
const sliceSize = 100

// churnHeadroom is how many pod addresses per node at least stay free for
// churn; churn cycles through whatever the subnet has beyond the endpoints.
const churnHeadroom = 32

// namespaces spreads the services over this many namespaces.
const namespaces = 10

// world is the cluster the bench simulates, laid out as nb-shapes.md did:
// endpoint e is pod e/K+3 in node (e mod K)'s subnet; the services own
// consecutive endpoints (M each, or as the size's mix deals them); service s is hosted on node (s mod K); its load-balancer IP is
// 172.18.(128+s/250).(s mod 250+1). Every host serves N/K services whose
// pods sit on every node.
type world struct {
	size size
	topo testenv.Topology
	// perNode is the number of endpoint pods on the busiest node.
	perNode int
	// hostBits is the size of each node's pod subnet.
	hostBits int
	// used counts the endpoint pods on each node; churned counts the pods
	// churn took there (cycling through the rest of the subnet).
	used, churned []int
	// first is the global index of each service's first endpoint.
	first []int
	// cacheDir, when set, keeps the databases of each layout's topology
	// once written (cached): the next OVN environments start from copies.
	cacheDir string
	cached   map[string][2]string // layout name → NB and SB files
	// natMatch: the OVN of this run has NAT.match (the master then writes
	// the gateway path's per-service NAT rows); set by run.
	natMatch bool
}

func newWorld(sz size) (*world, error) {
	switch {
	case sz.Services < 1 || (sz.Endpoints < 1 && sz.Mix == "") || sz.Nodes < 2:
		return nil, fmt.Errorf("need at least 1 service, 1 endpoint and 2 nodes (got %s)", sz)
	case sz.Mix != "" && sz.Mix != mixEnvelope:
		return nil, fmt.Errorf("unknown endpoint mix %q (want %s)", sz.Mix, mixEnvelope)
	case sz.Nodes > maxNodes:
		return nil, fmt.Errorf("at most %d nodes (external addresses are 172.18.0.0/18)", maxNodes)
	case sz.Services > 250*120:
		return nil, fmt.Errorf("at most %d services (load-balancer IPs are 172.18.128.0/17)", 250*120)
	}
	total := sz.total()
	perNode := (total + sz.Nodes - 1) / sz.Nodes
	hostBits := bits.Len(uint(perNode + 3 + churnHeadroom + 1))
	cluster, err := clusterSubnet(sz.Nodes << hostBits)
	if err != nil {
		return nil, fmt.Errorf("%d nodes with /%d pod subnets: %w", sz.Nodes, 32-hostBits, err)
	}
	w := &world{size: sz, perNode: perNode, hostBits: hostBits, used: make([]int, sz.Nodes), churned: make([]int, sz.Nodes),
		first: make([]int, sz.Services), cached: map[string][2]string{}}
	t := testenv.Topology{
		Families:             []ipfamily.Family{ipfamily.V4},
		ClusterSubnets:       []netip.Prefix{cluster},
		JoinSubnets:          []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")},
		ClusterRouterJoinIPs: []netip.Prefix{netip.MustParsePrefix("100.64.0.1/16")},
		ExternalGateways:     []netip.Addr{netip.MustParseAddr("172.18.0.1")},
		DynamicNeighbours:    true,
	}
	join, ext, hosts := netip.MustParsePrefix("100.64.0.0/16"), netip.MustParsePrefix("172.18.0.0/18"), netip.MustParsePrefix("172.18.64.0/18")
	transit := netip.MustParsePrefix("100.88.0.0/16")
	for i := 0; i < sz.Nodes; i++ {
		t.Nodes = append(t.Nodes, testenv.TopologyNode{
			Name:        fmt.Sprintf("node%d", i+1),
			ID:          i + 2,
			Subnets:     []netip.Prefix{netip.PrefixFrom(nth4(cluster, i<<hostBits), 32-hostBits)},
			JoinIPs:     []netip.Prefix{netip.PrefixFrom(nth4(join, i+2), 16)},
			ExternalIPs: []netip.Prefix{netip.PrefixFrom(nth4(ext, i+2), 16)},
			HostIPs:     []netip.Prefix{netip.PrefixFrom(nth4(hosts, i+1), 16)},
			// Used by the interconnect layout only (zoneLayout).
			TransitIPs: []netip.Prefix{netip.PrefixFrom(nth4(transit, i+2), 16)},
		})
	}
	w.topo = t
	for e := 0; e < total; e++ {
		w.used[e%sz.Nodes]++
	}
	for svc, e := 0, 0; svc < sz.Services; svc++ {
		w.first[svc] = e
		e += sz.endpointsOf(svc)
	}
	return w, nil
}

// ovnTimeout bounds one ovn-nbctl call and northd's first sync: 30 s plus
// 40 ms per node (5,000 nodes take northd a minute or more).
func (w *world) ovnTimeout() time.Duration {
	return 30*time.Second + time.Duration(len(w.topo.Nodes))*40*time.Millisecond
}

// maxNodes fits the nodes' external addresses in 172.18.0.0/18 (the host
// addresses are 172.18.64.0/18, the load-balancer IPs 172.18.128.0/17;
// transit addresses 100.88.0.0/16).
const maxNodes = 16000

// layout is what one OVN environment's NB holds before any egress row: the
// whole topology on one central NB, or one interconnect zone's.
type layout struct {
	// name keys the cached databases ("central", "zone-<node>").
	name string
	// topo is the topology the layout comes from (Interconnect for a zone).
	topo testenv.Topology
	// zone names the zone's node; empty: the central NB.
	zone string
}

// central is the layout of one NB holding every node.
func (w *world) central() layout { return layout{name: "central", topo: w.topo} }

// zoneLayout is node's interconnect zone: its own node switch, GR and
// ovn_cluster_router, the transit switch with a remote port and a route for
// every other node (as ovn-kubernetes' zone controllers build it).
func (w *world) zoneLayout(node string) layout {
	t := w.topo
	t.Interconnect = true
	return layout{name: "zone-" + node, topo: t, zone: node}
}

func (l layout) commands() []string {
	if l.zone != "" {
		return l.topo.ZoneNBCtlCommands(l.zone)
	}
	return l.topo.NBCtlCommands()
}

// nth4 is the n-th address of an IPv4 prefix (ipfamily.Nth walks, which
// thousands of nodes' subnets cannot afford).
func nth4(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) + uint32(n)
	binary.BigEndian.PutUint32(a[:], v)
	return netip.AddrFrom4(a)
}

// clusterSubnet is the cluster network for n pod addresses: the 10.244.0.0/16
// of the earlier runs when it fits, else the smallest prefix of 10.128.0.0/9
// that holds them (ovn-kubernetes' default is 10.128.0.0/14).
func clusterSubnet(n int) (netip.Prefix, error) {
	if n <= 1<<16 {
		return netip.MustParsePrefix("10.244.0.0/16"), nil
	}
	b := bits.Len(uint(n - 1))
	if b > 23 {
		return netip.Prefix{}, fmt.Errorf("%d pod addresses do not fit in 10.128.0.0/9", n)
	}
	return netip.PrefixFrom(netip.MustParseAddr("10.128.0.0"), 32-b), nil
}

// config is translation's configuration for the world: ovn-kubernetes'
// defaults, the given backend, and node agents taken as ready (the bench
// measures the master; the agents' side is the node scenario).
func (w *world) config(b translate.Backend) translate.Config {
	c := translate.DefaultConfig()
	c.ClusterSubnets = w.topo.ClusterSubnets
	c.Backend = b
	c.AssumeAgentsReady = true
	c.NATMatch = w.natMatch
	return c
}

func (w *world) nodeName(i int) string { return w.topo.Nodes[i].Name }

// host is the node index hosting service s.
func (w *world) host(s int) int { return s % w.size.Nodes }

func (w *world) namespace(s int) string { return fmt.Sprintf("bench-%d", s%namespaces) }

func (w *world) serviceName(s int) string { return fmt.Sprintf("svc-%05d", s) }

func (w *world) key(s int) string { return w.namespace(s) + "/" + w.serviceName(s) }

// lbIP is service s's load-balancer ingress IP.
func (w *world) lbIP(s int) netip.Addr {
	return netip.AddrFrom4([4]byte{172, 18, byte(128 + s/250), byte(s%250 + 1)})
}

// endpoint is the address and node of service s's j-th endpoint.
func (w *world) endpoint(s, j int) (netip.Addr, int) {
	e := w.first[s] + j
	n := e % w.size.Nodes
	return w.topo.Nodes[n].PodIP(ipfamily.V4, e/w.size.Nodes+3), n
}

// newPod takes a pod address on node n that no endpoint uses (for churn),
// cycling through the subnet beyond the endpoints.
func (w *world) newPod(n int) netip.Addr {
	lo, hi := w.used[n]+3, 1<<w.hostBits-2
	ip := w.topo.Nodes[n].PodIP(ipfamily.V4, lo+w.churned[n]%(hi-lo+1))
	w.churned[n]++
	return ip
}

// mgmtIP is node n's management-port address (the host path's next hop).
func (w *world) mgmtIP(n int) netip.Addr { return w.topo.Nodes[n].MgmtIPs()[0] }

// endpointsOf renders service s's endpoints as "ip@node".
func (w *world) endpointsOf(s int) []string {
	out := make([]string, 0, w.size.endpointsOf(s))
	for j := 0; j < w.size.endpointsOf(s); j++ {
		ip, n := w.endpoint(s, j)
		out = append(out, ip.String()+"@"+w.nodeName(n))
	}
	return out
}

// objects are the cluster objects; withHosts sets every status.host.
type objects struct {
	nodes  []*corev1.Node
	svcs   []*corev1.Service
	slices []*discoveryv1.EndpointSlice
	ess    []*egressv1.EgressService
}

func (w *world) objects(withHosts bool) objects {
	var o objects
	for i, n := range w.topo.Nodes {
		node := w.topo.NodeObject(n)
		shapeNode(node, i)
		o.nodes = append(o.nodes, node)
	}
	for s := 0; s < w.size.Services; s++ {
		ns, name := w.namespace(s), w.serviceName(s)
		svc := testenv.LoadBalancerService(ns, name, w.lbIP(s).String())
		// MetalLB-style load balancers need no node ports, and 10,000
		// services would exhaust the node-port range.
		noNodePorts := false
		svc.Spec.AllocateLoadBalancerNodePorts = &noNodePorts
		o.svcs = append(o.svcs, svc)
		o.slices = append(o.slices, w.slices(s)...)
		host := ""
		if withHosts {
			// The host carries the service's label, as the master keeps it
			// (its 5,000 label patches at the envelope overflow the fake
			// clientset's watch channel).
			host = w.nodeName(w.host(s))
			o.nodes[w.host(s)].Labels[hosts.NodeLabel(ns, name)] = ""
		}
		o.ess = append(o.ess, testenv.EgressService(ns, name, host))
	}
	return o
}

// slices are service s's EndpointSlices, at most sliceSize endpoints each
// (the first keeps the name a one-slice service has).
func (w *world) slices(s int) []*discoveryv1.EndpointSlice {
	eps := w.endpointsOf(s)
	var out []*discoveryv1.EndpointSlice
	for i := 0; i < len(eps); i += sliceSize {
		part := testenv.EndpointSlices(w.namespace(s), w.serviceName(s), eps[i:min(i+sliceSize, len(eps))]...)
		for _, sl := range part {
			if i > 0 {
				sl.Name = fmt.Sprintf("%s-%d", sl.Name, i/sliceSize)
			}
		}
		for _, sl := range part {
			shapeSlice(sl)
		}
		out = append(out, part...)
	}
	return out
}

func (o objects) translateObjects() translate.Objects {
	return translate.Objects{EgressServices: o.ess, Services: o.svcs, EndpointSlices: o.slices, Nodes: o.nodes}
}

// kubeObjects are the objects the core clientset holds.
func (o objects) kubeObjects() []runtime.Object {
	out := make([]runtime.Object, 0, len(o.nodes)+len(o.svcs)+len(o.slices))
	for _, n := range o.nodes {
		out = append(out, n)
	}
	for _, s := range o.svcs {
		out = append(out, s)
	}
	for _, s := range o.slices {
		out = append(out, s)
	}
	return out
}

func (o objects) egressObjects() []runtime.Object {
	out := make([]runtime.Object, 0, len(o.ess))
	for _, e := range o.ess {
		out = append(out, e)
	}
	return out
}

// desired translates the objects as the master would.
func desired(cfg translate.Config, o objects) *translate.Desired {
	return egressservice.Translate(translate.InputFromObjects(cfg, o.translateObjects()))
}

// rowCounts are the rows of a desired state by table.
type rowCounts struct {
	AddressSets int `json:"address_sets"`
	Addresses   int `json:"addresses"`
	Policies    int `json:"policies"`
	NATs        int `json:"nats"`
}

func countRows(d *translate.Desired) rowCounts {
	as, pol, nat, addrs := d.Count()
	return rowCounts{AddressSets: as, Addresses: addrs, Policies: pol, NATs: nat}
}
