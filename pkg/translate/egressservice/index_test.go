package egressservice

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// indexWorld changes a small cluster at random the way informers deliver
// changes (a changed object is a new object), and tells an Index each
// change as the translation controller does.
type indexWorld struct {
	*world
	r     *rand.Rand
	x     *Index
	keys  []string
	nodes int
	// rows are the rows rendered so far, key by key as Touched named them.
	rows map[translate.Key]*translate.Rows
	// deleted are nodes deleted, to come back.
	deleted []*translate.NodeInfo
	version int
}

// Members implements Members: NB's members as the world has them now.
func (m *indexWorld) Members(set string) []string { return m.In.Current[set] }

func newIndexWorld(seed uint64) *indexWorld {
	r := rand.New(rand.NewPCG(seed, 7))
	fams := []ipfamily.Family{ipfamily.V4}
	if r.IntN(3) == 0 {
		fams = append(fams, ipfamily.V6)
	}
	var base *world
	if r.IntN(4) == 0 {
		base = icWorld(5, fams...)
		base.In.Zone = fmt.Sprintf("node%d", 1+r.IntN(5))
	} else {
		base = newWorld(5, fams...)
	}
	m := &indexWorld{world: base, r: r, nodes: 5, rows: map[translate.Key]*translate.Rows{}}
	m.AddNode(6, translate.GatewayModeLocal)
	m.nodes = 6
	cfg := &m.In.Config
	if r.IntN(2) == 0 {
		cfg.Backend = translate.BackendOVN
		cfg.NATMatch = r.IntN(3) == 0 // OVN ≥ 24.09
	}
	if r.IntN(3) == 0 {
		cfg.UnassignedTraffic = translate.UnassignedDrop
	}
	cfg.AssumeAgentsReady = r.IntN(2) == 0
	if r.IntN(3) == 0 {
		cfg.ReroutePriority, cfg.AllowPriority = 90, 95
	}
	if r.IntN(3) == 0 {
		cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, netip.MustParsePrefix("10.97.0.0/16"))
	}
	m.In.Gateways = map[string]translate.GatewayInfo{}
	m.x = NewIndex(m.In.Config, m.In.Zone, m)
	for name, n := range m.In.Nodes {
		m.x.SetNode(name, n)
	}
	if m.In.Zone != "" {
		m.setZoneFacts()
	}
	for i := range 14 {
		key := fmt.Sprintf("ns%d/svc%02d", i%3, i)
		if i == 13 {
			key = "ns-a/svc13" // "ns-a/…" < "ns/…" as strings, not as namespaces
		}
		m.keys = append(m.keys, key)
		m.ES(key, m.host())
		m.setService(key)
		m.setEndpoints(key)
		m.tell(key)
	}
	return m
}

func (m *indexWorld) host() string {
	switch n := m.r.IntN(m.nodes + 3); n {
	case m.nodes:
		return ""
	case m.nodes + 1:
		return egressv1.HostAll
	case m.nodes + 2:
		return "gone"
	default:
		return fmt.Sprintf("node%d", n+1)
	}
}

func (m *indexWorld) setService(key string) {
	ingress := []string{fmt.Sprintf("172.18.0.%d", 100+m.r.IntN(4))}
	if len(m.Families) == 2 && m.r.IntN(2) == 0 {
		ingress = append(ingress, fmt.Sprintf("fc00::%x", 100+m.r.IntN(4)))
	}
	s := m.Svc(key, ingress...)
	if m.r.IntN(8) == 0 {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
}

// setEndpoints gives the Service new endpoints from a small pool, so that
// services often share an address; now and then one outside the cluster
// subnets, in a node's pod subnet when that node was renumbered.
func (m *indexWorld) setEndpoints(key string) {
	var eps []string
	for range m.r.IntN(5) {
		node := 1 + m.r.IntN(m.nodes)
		ip := fmt.Sprintf("10.244.%d.%d", node, 2+m.r.IntN(12))
		switch {
		case len(m.Families) == 2 && m.r.IntN(2) == 0:
			ip = fmt.Sprintf("fd00:10:244:%x::%x", node, 2+m.r.IntN(12))
		case m.r.IntN(10) == 0:
			ip = fmt.Sprintf("10.250.%d.%d", node, 2+m.r.IntN(4))
		}
		eps = append(eps, fmt.Sprintf("%s@node%d", ip, node))
	}
	m.EPs(key, eps...)
}

// tell gives the Index an EgressService's objects as they are now.
func (m *indexWorld) tell(key string) {
	i := slices.IndexFunc(m.In.EgressServices, func(e *egressv1.EgressService) bool { return translate.EgressServiceKey(e) == key })
	if i < 0 {
		m.x.DeleteService(key)
		return
	}
	// Versions as an API server gives them: a changed object is a new one,
	// with a new resourceVersion (the Index keeps the parse of a version).
	if svc := m.In.Services[key]; svc != nil && svc.ResourceVersion == "" {
		m.version++
		svc.UID, svc.ResourceVersion = types.UID(key), fmt.Sprint(m.version)
	}
	for _, sl := range m.In.EndpointSlices[key] {
		if sl.ResourceVersion == "" {
			m.version++
			sl.UID, sl.ResourceVersion = types.UID(key+"/"+sl.Name), fmt.Sprint(m.version)
		}
	}
	m.x.SetService(ServiceObjects{EgressService: m.In.EgressServices[i], Service: m.In.Services[key], Slices: m.In.EndpointSlices[key]})
}

// node returns a copy of a node's parse to change (a re-parsed Node).
func (m *indexWorld) node(name string) *translate.NodeInfo {
	n := *m.In.Nodes[name]
	m.In.Nodes[name] = &n
	return &n
}

func (m *indexWorld) setZoneFacts() {
	z := ZoneFacts{ClusterRouteShared: m.r.IntN(3) == 0, EgressNodes: map[string]bool{}}
	if m.r.IntN(3) == 0 {
		z.ForeignClusterRoutes = map[netip.Prefix]bool{m.In.Config.ClusterSubnets[0].Masked(): true}
	}
	if m.r.IntN(2) == 0 {
		z.EgressNodes[fmt.Sprintf("node%d", 1+m.r.IntN(m.nodes))] = true
	}
	m.In.ForeignClusterRoutes, m.In.ClusterRouteShared, m.In.EgressNodes = z.ForeignClusterRoutes, z.ClusterRouteShared, z.EgressNodes
	m.x.SetZoneFacts(z)
}

func (m *indexWorld) replaceES(i int, mutate func(*egressv1.EgressService)) {
	c := m.In.EgressServices[i].DeepCopy()
	mutate(c)
	m.In.EgressServices[i] = c
}

// step makes one random change and tells the Index.
func (m *indexWorld) step() string {
	key := m.keys[m.r.IntN(len(m.keys))]
	i := slices.IndexFunc(m.In.EgressServices, func(e *egressv1.EgressService) bool { return translate.EgressServiceKey(e) == key })
	node := fmt.Sprintf("node%d", 1+m.r.IntN(m.nodes))
	choice := m.r.IntN(16)
	if _, ok := m.In.Nodes[node]; !ok && (choice == 5 || (choice >= 9 && choice <= 13)) {
		return "nothing" // a deleted node changes no more
	}
	switch choice {
	case 0, 1:
		if i >= 0 {
			h := m.host()
			m.replaceES(i, func(e *egressv1.EgressService) {
				e.Status.Host = h
				e.Spec.SourceIPBy = egressv1.LoadBalancerIP
				if h == egressv1.HostAll {
					e.Spec.SourceIPBy = egressv1.Network
				}
			})
			m.tell(key)
			return "move " + key + " to " + h
		}
	case 2, 3:
		m.setEndpoints(key)
		m.tell(key)
		return "endpoints of " + key
	case 4:
		m.setService(key)
		m.tell(key)
		return "service " + key
	case 5:
		// The node's agent reports some services.
		n := m.node(node)
		n.Report = translate.Report{}
		for _, k := range m.keys {
			if m.r.IntN(2) == 0 && m.In.Services[k] != nil && slices.ContainsFunc(m.In.EgressServices, func(e *egressv1.EgressService) bool { return translate.EgressServiceKey(e) == k }) {
				m.Ready(node, k)
				if m.r.IntN(3) == 0 {
					// An agent that is behind: the right addresses, old endpoints.
					r := n.Report[k]
					r.Endpoints = "behind"
					n.Report[k] = r
				}
			}
		}
		m.x.SetNode(node, n)
		return "report of " + node
	case 6:
		gw := translate.GatewayInfo{ExternalPortKnown: m.r.IntN(4) > 0, NATAddressesRouter: m.r.IntN(2) == 0, JoinIPs: map[ipfamily.Family]netip.Addr{}}
		if m.r.IntN(2) == 0 {
			gw.JoinIPs[ipfamily.V4] = netip.MustParseAddr(fmt.Sprintf("100.64.1.%d", 1+m.r.IntN(3)))
		}
		if m.r.IntN(2) == 0 {
			gw.SNAT = map[ipfamily.Family]translate.GatewaySNAT{ipfamily.V4: {ExternalIP: netip.MustParseAddr(fmt.Sprintf("172.18.1.%d", 1+m.r.IntN(3))), PortRange: []string{"", "1024-65535"}[m.r.IntN(2)]}}
		}
		if m.r.IntN(4) == 0 {
			delete(m.In.Gateways, node)
			m.x.SetGateway(node, translate.GatewayInfo{}, false)
			return "no gateway of " + node
		}
		m.In.Gateways[node] = gw
		m.x.SetGateway(node, gw, true)
		return "gateway of " + node
	case 7:
		if i >= 0 {
			m.In.EgressServices = slices.Delete(m.In.EgressServices, i, i+1)
			m.tell(key)
			return "delete " + key
		}
		m.ES(key, m.host())
		m.tell(key)
		return "create " + key
	case 8:
		// NB's members of the node's sets: some of the endpoints there.
		for _, owner := range []string{translate.OwnerHost, translate.OwnerNetwork} {
			for _, f := range m.Families {
				var members []string
				for _, slices := range m.In.EndpointSlices {
					for _, s := range slices {
						for _, e := range s.Endpoints {
							if ip := netip.MustParseAddr(e.Addresses[0]); ipfamily.Of(ip) == f && m.r.IntN(2) == 0 {
								members = append(members, ip.String())
							}
						}
					}
				}
				m.In.Current[translate.AddressSetName(setID(owner, node, f))] = members
			}
		}
		m.x.RefreshMembers(node)
		return "NB members of " + node
	case 9:
		n := m.node(node)
		n.Labels, n.Ready = map[string]string{"relabeled": fmt.Sprint(m.r.IntN(100))}, m.r.IntN(2) == 0
		m.x.SetNode(node, n)
		return "labels of " + node
	case 10:
		n := m.node(node)
		n.GatewayMode = []string{translate.GatewayModeShared, translate.GatewayModeLocal, ""}[m.r.IntN(3)]
		m.x.SetNode(node, n)
		return "gateway mode of " + node
	case 11:
		n := m.node(node)
		n.MgmtIPs, n.JoinIPs, n.TransitIPs = maps.Clone(n.MgmtIPs), maps.Clone(n.JoinIPs), maps.Clone(n.TransitIPs)
		switch m.r.IntN(4) {
		case 0:
			n.MgmtIPs[ipfamily.V4] = netip.MustParseAddr(fmt.Sprintf("10.244.%d.%d", 50+m.r.IntN(3), 2+m.r.IntN(3)))
		case 1:
			n.JoinIPs[ipfamily.V4] = netip.MustParseAddr(fmt.Sprintf("100.64.0.%d", 50+m.r.IntN(3)))
		case 2:
			if n.TransitIPs == nil {
				n.TransitIPs = map[ipfamily.Family]netip.Addr{}
			}
			if m.r.IntN(3) == 0 {
				delete(n.TransitIPs, ipfamily.V4)
			} else {
				n.TransitIPs[ipfamily.V4] = netip.MustParseAddr(fmt.Sprintf("100.88.0.%d", 50+m.r.IntN(3)))
			}
		default:
			delete(n.MgmtIPs, ipfamily.V4)
		}
		m.x.SetNode(node, n)
		return "addresses of " + node
	case 12:
		n := m.node(node)
		n.HostIPs = []netip.Addr{netip.MustParseAddr(fmt.Sprintf("172.18.2.%d", 1+m.r.IntN(9)))}
		m.x.SetNode(node, n)
		return "host addresses of " + node
	case 13:
		// A node renumbered into the pool of addresses outside the
		// cluster subnets, or back.
		n := m.node(node)
		j, _ := strings.CutPrefix(node, "node")
		n.Subnets = []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.244.%s.0/24", j))}
		if m.r.IntN(2) == 0 {
			n.Subnets = []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.250.%s.0/24", j))}
		}
		m.x.SetNode(node, n)
		return "subnets of " + node
	case 14:
		if _, ok := m.In.Nodes[node]; ok && m.r.IntN(2) == 0 {
			m.deleted = append(m.deleted, m.In.Nodes[node])
			delete(m.In.Nodes, node)
			m.x.SetNode(node, nil)
			return "delete " + node
		}
		if len(m.deleted) > 0 {
			n := m.deleted[len(m.deleted)-1]
			m.deleted = m.deleted[:len(m.deleted)-1]
			m.In.Nodes[n.Name] = n
			m.x.SetNode(n.Name, n)
			return "recreate " + n.Name
		}
	case 15:
		if m.In.Zone != "" {
			m.setZoneFacts()
			return "zone facts"
		}
	}
	return "nothing"
}

// render renders the keys the Index touched over the rows so far, as the
// controller applies them.
func (m *indexWorld) render() {
	touched := m.x.Touched()
	d := m.x.Rows(touched)
	for _, k := range touched {
		if r, ok := d.Rows[k]; ok {
			m.rows[k] = r
		} else {
			delete(m.rows, k)
		}
	}
}

// TestIndexIsTranslate changes clusters at random, step by step (services
// created, moved, deleted, their endpoints and Services changed, shared
// endpoints, nodes' reports, gateway modes, addresses, subnets, gateway
// routers, NB members, zones and their facts, nodes deleted and back), and
// tells an Index each change as the controller would. At every step the
// rows of the keys the Index said it touched, rendered on top of the rows
// before, must equal Translate of the world from scratch, and so must each
// service's problems: any bookkeeping of the Index left out (what a service
// read, the claims, the report compare, the sets' patching) shows as a
// difference here.
func TestIndexIsTranslate(t *testing.T) {
	seeds := uint64(200)
	if s := os.Getenv("OVN_EGRESS_INDEX_SEEDS"); s != "" {
		if _, err := fmt.Sscan(s, &seeds); err != nil {
			t.Fatalf("OVN_EGRESS_INDEX_SEEDS=%q: %v", s, err)
		}
	}
	for seed := range seeds {
		m := newIndexWorld(seed)
		m.render()
		var steps []string
		for step := range 40 {
			steps = append(steps, m.step())
			if m.r.IntN(4) > 0 {
				continue // several changes between two renders
			}
			m.render()
			want := Translate(m.In)
			gy, _ := translate.YAML(&translate.Desired{Rows: m.rows})
			wy, _ := translate.YAML(&translate.Desired{Rows: want.Rows})
			if string(gy) != string(wy) {
				t.Fatalf("seed %d step %d (%s): the Index's rows differ from Translate's:\n%s",
					seed, step, strings.Join(steps, "; "), lineDiff(string(gy), string(wy)))
			}
			for k, r := range m.rows {
				kept := m.x.Digests(k)
				for _, as := range r.AddressSets {
					if d, ok := kept[as.Name]; ok && d != AddressesDigest(as.Addresses) {
						t.Fatalf("seed %d step %d (%s): the digest kept of %s is not its addresses'", seed, step, strings.Join(steps, "; "), as.Name)
					}
				}
			}
			for _, es := range m.In.EgressServices {
				key := translate.EgressServiceKey(es)
				if g, w := m.x.Problems(key), want.Problems.For(key); !reflect.DeepEqual(translate.Problems(g), w) && (len(g) > 0 || len(w) > 0) {
					t.Fatalf("seed %d step %d (%s): problems of %s:\n%v\nwant\n%v", seed, step, strings.Join(steps, "; "), key, g, w)
				}
			}
		}
	}
}

// lineDiff shows the lines only one side has.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var out []string
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestIndexRoutesWithoutSets: a host of the zone whose sets cannot be
// written (no management address) still routes the cluster's pod traffic
// for the service that moved onto it, and stops when it leaves: the route
// is the host key's only row then, so the move alone must touch the key.
func TestIndexRoutesWithoutSets(t *testing.T) {
	w := icWorld(2)
	w.In.Zone = "node1"
	n := *w.In.Nodes["node1"]
	n.MgmtIPs = nil
	w.In.Nodes["node1"] = &n
	w.In.Config.AssumeAgentsReady = true
	w.ES("ns/a", "node2")
	w.Svc("ns/a", "172.18.0.100")
	w.EPs("ns/a", "10.244.1.5@node1")
	x := w.index()
	x.SetZoneFacts(ZoneFacts{})
	x.Rows(x.Touched())
	for _, host := range []string{"node1", "node2"} {
		w.In.EgressServices[0] = w.In.EgressServices[0].DeepCopy()
		w.In.EgressServices[0].Status.Host = host
		x.SetService(ServiceObjects{EgressService: w.In.EgressServices[0], Service: w.In.Services["ns/a"], Slices: w.In.EndpointSlices["ns/a"]})
		touched := x.Touched()
		if !slices.Contains(touched, translate.NodeKey("node1")) {
			t.Fatalf("moved to %s: touched %v, not node1's key", host, touched)
		}
		routes := 0
		if r := x.Rows(touched).Rows[translate.NodeKey("node1")]; r != nil {
			routes = len(r.Routes)
		}
		if want := map[string]int{"node1": 1, "node2": 0}[host]; routes != want {
			t.Errorf("moved to %s: node1 has %d cluster routes; want %d", host, routes, want)
		}
	}
}
