package main

import (
	"fmt"
	"math/bits"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// size is the scale of a run: services × endpoints per service on nodes.
type size struct {
	Services  int `json:"services"`
	Endpoints int `json:"endpoints_per_service"`
	Nodes     int `json:"nodes"`
}

func (s size) String() string {
	return fmt.Sprintf("%d services × %d endpoints on %d nodes", s.Services, s.Endpoints, s.Nodes)
}

// churnHeadroom is how many pod addresses per node at least stay free for
// churn; churn cycles through whatever the subnet has beyond the endpoints.
const churnHeadroom = 32

// namespaces spreads the services over this many namespaces.
const namespaces = 10

// world is the cluster the bench simulates, laid out as nb-shapes.md did:
// endpoint e is pod e/K+3 in node (e mod K)'s subnet and belongs to service
// e/M; service s is hosted on node (s mod K); its load-balancer IP is
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
	// natMatch: the OVN of this run has NAT.match (the master then writes
	// the gateway path's per-service NAT rows); set by run.
	natMatch bool
}

func newWorld(sz size) (*world, error) {
	switch {
	case sz.Services < 1 || sz.Endpoints < 1 || sz.Nodes < 2:
		return nil, fmt.Errorf("need at least 1 service, 1 endpoint and 2 nodes (got %s)", sz)
	case sz.Nodes > 250:
		return nil, fmt.Errorf("at most 250 nodes (join and external addresses are one /24 each)")
	case sz.Services > 250*120:
		return nil, fmt.Errorf("at most %d services (load-balancer IPs are 172.18.128.0/17)", 250*120)
	}
	total := sz.Services * sz.Endpoints
	perNode := (total + sz.Nodes - 1) / sz.Nodes
	hostBits := bits.Len(uint(perNode + 3 + churnHeadroom + 1))
	if sz.Nodes<<hostBits > 1<<16 {
		return nil, fmt.Errorf("%d nodes with /%d pod subnets do not fit in 10.244.0.0/16", sz.Nodes, 32-hostBits)
	}
	w := &world{size: sz, perNode: perNode, hostBits: hostBits, used: make([]int, sz.Nodes), churned: make([]int, sz.Nodes)}
	t := testenv.Topology{
		Families:             []ipfamily.Family{ipfamily.V4},
		ClusterSubnets:       []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		JoinSubnets:          []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")},
		ClusterRouterJoinIPs: []netip.Prefix{netip.MustParsePrefix("100.64.0.1/16")},
		ExternalGateways:     []netip.Addr{netip.MustParseAddr("172.18.0.1")},
	}
	base := netip.MustParseAddr("10.244.0.0").As4()
	for i := 0; i < sz.Nodes; i++ {
		off := uint32(i) << hostBits
		a := base
		a[2] += byte(off >> 8)
		a[3] += byte(off)
		t.Nodes = append(t.Nodes, testenv.TopologyNode{
			Name:        fmt.Sprintf("node%d", i+1),
			ID:          i + 2,
			Subnets:     []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4(a), 32-hostBits)},
			JoinIPs:     []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("100.64.0.%d/16", i+2))},
			ExternalIPs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("172.18.0.%d/16", i+2))},
			HostIPs:     []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("172.18.1.%d/16", i+1))},
		})
	}
	w.topo = t
	for e := 0; e < total; e++ {
		w.used[e%sz.Nodes]++
	}
	return w, nil
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
	e := s*w.size.Endpoints + j
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
	out := make([]string, 0, w.size.Endpoints)
	for j := 0; j < w.size.Endpoints; j++ {
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
	for _, n := range w.topo.Nodes {
		o.nodes = append(o.nodes, w.topo.NodeObject(n))
	}
	for s := 0; s < w.size.Services; s++ {
		ns, name := w.namespace(s), w.serviceName(s)
		svc := testenv.LoadBalancerService(ns, name, w.lbIP(s).String())
		// MetalLB-style load balancers need no node ports, and 10,000
		// services would exhaust the node-port range.
		noNodePorts := false
		svc.Spec.AllocateLoadBalancerNodePorts = &noNodePorts
		o.svcs = append(o.svcs, svc)
		o.slices = append(o.slices, testenv.EndpointSlices(ns, name, w.endpointsOf(s)...)...)
		host := ""
		if withHosts {
			host = w.nodeName(w.host(s))
		}
		o.ess = append(o.ess, testenv.EgressService(ns, name, host))
	}
	return o
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
	return translate.Translate(translate.InputFromObjects(cfg, o.translateObjects()))
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
