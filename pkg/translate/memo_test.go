package translate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// memoWorld changes a small cluster at random the way informers deliver
// changes (a changed object is a new object) and keeps the endpoint cache a
// controller would (the same slice while a Service's objects are unchanged).
type memoWorld struct {
	*world
	r     *rand.Rand
	keys  []string
	nodes int
}

func newMemoWorld(seed uint64) *memoWorld {
	r := rand.New(rand.NewPCG(seed, 7))
	fams := []ipfamily.Family{ipfamily.V4}
	if r.IntN(3) == 0 {
		fams = append(fams, ipfamily.V6)
	}
	m := &memoWorld{world: newWorld(5, fams...), r: r, nodes: 5}
	m.addNode(6, GatewayModeLocal)
	m.nodes = 6
	if r.IntN(2) == 0 {
		m.in.Config.Backend = BackendOVN
		m.in.Config.NATMatch = r.IntN(3) == 0 // OVN ≥ 24.09
	}
	if r.IntN(3) == 0 {
		m.in.Config.UnassignedTraffic = UnassignedDrop
	}
	m.in.Config.AssumeAgentsReady = r.IntN(2) == 0
	m.in.Endpoints = map[string][]Endpoint{}
	m.in.Gateways = map[string]GatewayInfo{}
	for i := range 14 {
		key := fmt.Sprintf("ns%d/svc%02d", i%3, i)
		m.keys = append(m.keys, key)
		m.es(key, m.host())
		m.setService(key)
		m.setEndpoints(key)
	}
	return m
}

func (m *memoWorld) host() string {
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

func (m *memoWorld) setService(key string) {
	ingress := []string{fmt.Sprintf("172.18.0.%d", 100+m.r.IntN(4))}
	if len(m.families) == 2 && m.r.IntN(2) == 0 {
		ingress = append(ingress, fmt.Sprintf("fc00::%x", 100+m.r.IntN(4)))
	}
	s := m.svc(key, ingress...)
	if m.r.IntN(8) == 0 {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
}

// setEndpoints gives the Service new endpoints from a small pool, so that
// services sometimes share an address.
func (m *memoWorld) setEndpoints(key string) {
	var eps []string
	for range m.r.IntN(5) {
		node := 1 + m.r.IntN(m.nodes)
		ip := fmt.Sprintf("10.244.%d.%d", node, 2+m.r.IntN(12))
		if len(m.families) == 2 && m.r.IntN(2) == 0 {
			ip = fmt.Sprintf("fd00:10:244:%x::%x", node, 2+m.r.IntN(12))
		}
		eps = append(eps, fmt.Sprintf("%s@node%d", ip, node))
	}
	m.eps(key, eps...)
	m.in.Endpoints[key] = ServiceEndpoints(m.in.Services[key], m.in.EndpointSlices[key], m.in.Config.ClusterSubnets)
}

func (m *memoWorld) replaceES(i int, mutate func(*egressv1.EgressService)) {
	c := m.in.EgressServices[i].DeepCopy()
	mutate(c)
	m.in.EgressServices[i] = c
}

// step makes one random change.
func (m *memoWorld) step(memo *Memo) string {
	key := m.keys[m.r.IntN(len(m.keys))]
	i := slices.IndexFunc(m.in.EgressServices, func(e *egressv1.EgressService) bool { return EgressServiceKey(e) == key })
	node := fmt.Sprintf("node%d", 1+m.r.IntN(m.nodes))
	switch m.r.IntN(12) {
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
			return "move " + key + " to " + h
		}
	case 2, 3:
		m.setEndpoints(key)
		return "endpoints of " + key
	case 4:
		m.setService(key)
		m.in.Endpoints[key] = ServiceEndpoints(m.in.Services[key], m.in.EndpointSlices[key], m.in.Config.ClusterSubnets)
		return "service " + key
	case 5:
		// The node's agent reports some services (a new NodeInfo, as a
		// re-parsed Node would be).
		n := *m.in.Nodes[node]
		n.Report = Report{}
		m.in.Nodes[node] = &n
		for _, k := range m.keys {
			if m.r.IntN(2) == 0 && m.in.Services[k] != nil && slices.ContainsFunc(m.in.EgressServices, func(e *egressv1.EgressService) bool { return EgressServiceKey(e) == k }) {
				m.ready(node, k)
				if m.r.IntN(3) == 0 {
					// An agent that is behind: the right addresses, old endpoints.
					r := n.Report[k]
					r.Endpoints = "behind"
					n.Report[k] = r
				}
			}
		}
		return "report of " + node
	case 6:
		m.in.Gateways[node] = GatewayInfo{ExternalPortKnown: true, NATAddressesRouter: m.r.IntN(2) == 0}
		return "gateway of " + node
	case 7:
		if i >= 0 {
			m.in.EgressServices = slices.Delete(m.in.EgressServices, i, i+1)
			memo.Forget(key)
			return "delete " + key
		}
		m.es(key, m.host())
		return "create " + key
	case 8:
		// NB's members of the node's sets: some of the endpoints there.
		m.in.Current = map[string][]string{}
		for _, f := range m.families {
			var members []string
			for _, eps := range m.in.Endpoints {
				for _, e := range eps {
					if ipfamily.Of(e.IP) == f && m.r.IntN(2) == 0 {
						members = append(members, e.IP.String())
					}
				}
			}
			m.in.Current[AddressSetName(setID(OwnerHost, node, f))] = members
		}
		return "NB members of " + node
	case 9:
		n := *m.in.Nodes[node]
		n.Labels = map[string]string{"relabeled": fmt.Sprint(m.r.IntN(100))}
		m.in.Nodes[node] = &n
		return "labels of " + node
	case 10:
		n := *m.in.Nodes[node]
		n.GatewayMode = []string{GatewayModeShared, GatewayModeLocal, ""}[m.r.IntN(3)]
		m.in.Nodes[node] = &n
		return "gateway mode of " + node
	case 11:
		n := *m.in.Nodes[node]
		n.MgmtIPs, n.JoinIPs = maps.Clone(n.MgmtIPs), maps.Clone(n.JoinIPs)
		if m.r.IntN(2) == 0 {
			n.MgmtIPs[ipfamily.V4] = netip.MustParseAddr(fmt.Sprintf("10.244.%d.%d", 50+m.r.IntN(3), 2+m.r.IntN(3)))
		} else {
			n.JoinIPs[ipfamily.V4] = netip.MustParseAddr(fmt.Sprintf("100.64.0.%d", 50+m.r.IntN(3)))
		}
		m.in.Nodes[node] = &n
		return "addresses of " + node
	}
	return "nothing"
}

// only asks for a random subset of keys, or all.
func (m *memoWorld) only() map[Key]bool {
	if m.r.IntN(3) == 0 {
		return nil
	}
	out := map[Key]bool{}
	for _, k := range m.in.AllKeys() {
		if m.r.IntN(2) == 0 {
			out[k] = true
		}
	}
	return out
}

// TestMemoNeverChangesTheResult changes clusters at random, step by step,
// and translates each state with a Memo carried along and without one: the
// two results must be identical, rows and problems, at every step.
func TestMemoNeverChangesTheResult(t *testing.T) {
	var total MemoStats
	for seed := range uint64(150) {
		m := newMemoWorld(seed)
		memo := NewMemo()
		var history []string
		for range 40 {
			history = append(history, m.step(memo))
			m.in.Only = m.only()
			plain := m.in
			with := m.in
			with.Memo = memo
			want := Translate(plain)
			got := Translate(with)
			st := memo.Stats()
			total.ServicesReused += st.ServicesReused
			total.SetsReused += st.SetsReused
			if !reflect.DeepEqual(got, want) {
				wy, _ := YAML(want)
				gy, _ := YAML(got)
				t.Fatalf("seed %d, after %v:\nwith the memo:\n%s\nwithout:\n%s", seed, history, gy, wy)
			}
		}
	}
	// The memo was used, not just carried along.
	if total.ServicesReused == 0 || total.SetsReused == 0 {
		t.Fatalf("nothing was reused: %+v", total)
	}
	t.Logf("reused %d services and %d sets", total.ServicesReused, total.SetsReused)
}

// TestMemoReusesWhatDidNotChange: after one service moves, a translation
// of every host resolves only that service again and renders only the two
// sets it moved between.
func TestMemoReusesWhatDidNotChange(t *testing.T) {
	w := newWorld(4)
	w.in.Config.AssumeAgentsReady = true
	w.in.Endpoints = map[string][]Endpoint{}
	for s := range 40 {
		key := fmt.Sprintf("ns/svc%02d", s)
		w.es(key, fmt.Sprintf("node%d", 1+s%4))
		w.svc(key, fmt.Sprintf("172.18.1.%d", s+1))
		w.eps(key, fmt.Sprintf("10.244.%d.%d@node%d", 1+s%4, 10+s, 1+s%4))
		w.in.Endpoints[key] = ServiceEndpoints(w.in.Services[key], w.in.EndpointSlices[key], w.in.Config.ClusterSubnets)
	}
	memo := NewMemo()
	w.in.Memo = memo
	first := Translate(w.in)
	if st := memo.Stats(); st.ServicesReused != 0 || st.Services != 40 {
		t.Fatalf("first translation: %+v", st)
	}
	moved := w.in.EgressServices[0].DeepCopy() // ns/svc00 on node1
	moved.Status.Host = "node2"
	w.in.EgressServices[0] = moved
	second := Translate(w.in)
	st := memo.Stats()
	if st.Services != 40 || st.ServicesReused != 39 || st.Sets != 4 || st.SetsReused != 2 {
		t.Fatalf("after one move: %+v, want 39 of 40 services and 2 of 4 sets reused", st)
	}
	w.in.Memo = nil
	if want := Translate(w.in); !reflect.DeepEqual(second, want) {
		t.Fatal("the memoized translation differs from a fresh one")
	}
	if reflect.DeepEqual(first, second) {
		t.Fatal("moving a service changed nothing")
	}
}

// TestNodeLabelsAndReadinessAreNotTranslated: the NB rows and problems do
// not depend on a Node's labels or readiness (host selection reads them,
// and writes status.host). The master's translation controller relies on
// it to ignore label patches and heartbeats; a translation that starts
// reading either must change that controller's nodeChanged too.
func TestNodeLabelsAndReadinessAreNotTranslated(t *testing.T) {
	for seed := range uint64(60) {
		m := newMemoWorld(seed)
		for range 5 {
			m.step(nil)
		}
		want := Translate(m.in)
		for name, info := range m.in.Nodes {
			n := *info
			n.Labels = map[string]string{"egress-service.k8s.ovn.org/ns0-svc00": "", "zone": fmt.Sprint(seed)}
			n.Ready = !n.Ready
			m.in.Nodes[name] = &n
		}
		if got := Translate(m.in); !reflect.DeepEqual(got, want) {
			gy, _ := YAML(got)
			wy, _ := YAML(want)
			t.Fatalf("seed %d: other labels and readiness changed the translation:\n%s\nwas:\n%s", seed, gy, wy)
		}
	}
}
