package translate

import (
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// Memo carries results from one translation to the next, for a caller that
// translates the same cluster again and again (the master's translation
// controller). It never changes a result: Translate with a Memo returns
// exactly what it returns without one. It only saves work:
//
//   - a service whose inputs are the very objects of last time (the same
//     EgressService, Service, endpoints and host, compared by identity, as
//     informers replace an object on every change) is not resolved again,
//     and its contributions to address sets are reused;
//   - an address set whose contributions are all the same as last time is
//     not rendered again.
//
// A host is compared by the fields a hosted service reads (a Node also
// changes for its labels and for other services' reports).
//
// So when a host is drained, a translation of every host redoes only the
// services that moved and the sets they moved between. What a service's
// result depends on beyond those inputs makes it not memoized: an endpoint
// another EgressService also claims, an agent report that is behind (NB's
// current members decide), Network mode (every endpoint's node decides),
// and interconnect zones. Endpoints are compared by identity only when the
// caller gives them (Input.Endpoints), from a cache that returns the same
// slice while the Service and its EndpointSlices are unchanged.
//
// A Memo follows one Config (another Config starts it afresh) and is not
// safe for concurrent use. Rows and problems in a Desired may share memory
// with later translations: callers must not modify them.
type Memo struct {
	cfg      Config
	started  bool
	services map[*egressv1.EgressService]*memoService
	byKey    map[string]*egressv1.EgressService
	sets     map[setKey]*memoSet
	// known are the keys output since the Memo began: their sets in sets
	// are exactly those of their last translation (Input.Unlisted).
	known map[Key]bool
	stats MemoStats
	// hosts caches, for one translation, whether two parses of a node agree
	// on what a hosted service reads (a Node changes for its labels too).
	hosts map[[2]*NodeInfo]bool
	// owner is resolveConflicts' map, kept to spare the allocation.
	owner map[netip.Addr]int32
}

// MemoStats counts what the last translation reused.
type MemoStats struct {
	Services, ServicesReused int
	Sets, SetsReused         int
	// SetsPatched were rendered from the last rendering and the contributions
	// that came and went, not afresh.
	SetsPatched int
	// Unlisted are the contributions kept for the services of Input.Unlisted
	// hosts, which the translation did not see.
	Unlisted int
}

type memoService struct {
	// gone: a newer result of the service replaced this one, or the Memo
	// forgot it (its contributions are no one's current result).
	gone bool
	key  string
	svc  *corev1.Service
	eps  []Endpoint
	host *NodeInfo
	gw   GatewayInfo
	gwOK bool
	s    *service
}

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{services: map[*egressv1.EgressService]*memoService{}, byKey: map[string]*egressv1.EgressService{},
		sets: map[setKey]*memoSet{}, known: map[Key]bool{}}
}

// Forget drops what is kept for the EgressService "namespace/name" (it was deleted).
func (m *Memo) Forget(key string) {
	if m != nil {
		if e := m.services[m.byKey[key]]; e != nil {
			e.gone = true
			for _, c := range e.s.parts {
				if set := m.sets[c.set]; set != nil {
					set.loose = append(set.loose, c)
				}
			}
		}
		delete(m.services, m.byKey[key])
		delete(m.byKey, key)
	}
}

// Stats returns the counts of the last translation.
func (m *Memo) Stats() MemoStats {
	if m == nil {
		return MemoStats{}
	}
	return m.stats
}

// begin returns the Memo to use for this input (nil: none), starting it
// afresh when the configuration changed.
func (m *Memo) begin(in Input) *Memo {
	if m == nil || in.Zone != "" {
		return nil
	}
	if !m.started || !m.cfg.equal(in.Config) {
		m.cfg, m.started = in.Config, true
		clear(m.services)
		clear(m.byKey)
		clear(m.sets)
		clear(m.known)
	}
	m.stats = MemoStats{}
	m.hosts = map[[2]*NodeInfo]bool{}
	return m
}

// service returns es's memoized service when every input it was computed
// from is the same object as then.
func (m *Memo) service(t *translator, es *egressv1.EgressService) *service {
	if m == nil {
		return nil
	}
	m.stats.Services++
	e := m.services[es] // an informer's object: the same pointer while unchanged
	if e == nil {
		return nil
	}
	gw, gwOK := t.in.Gateways[es.Status.Host]
	if !m.reusable(e, t.in.Services[e.key], t.in.Endpoints[e.key], t.in.Nodes[es.Status.Host], gw, gwOK) {
		return nil
	}
	m.stats.ServicesReused++
	return e.s
}

// reusable reports whether a memoized service was computed from these very inputs.
func (m *Memo) reusable(e *memoService, svc *corev1.Service, eps []Endpoint, host *NodeInfo, gw GatewayInfo, gwOK bool) bool {
	if e.svc != svc || !sameSlice(e.eps, eps) || !m.sameHost(e.host, host, e.key) {
		return false
	}
	e.host = host
	return m.cfg.Backend != BackendOVN || (gwOK == e.gwOK && gw.equal(e.gw))
}

// KeyOf returns the "namespace/name" of es when the Memo holds a result for
// this very object.
func (m *Memo) KeyOf(es *egressv1.EgressService) (string, bool) {
	if m == nil {
		return "", false
	}
	e := m.services[es]
	if e == nil {
		return "", false
	}
	return e.key, true
}

// Reuses reports whether a translation of in can take services from the
// Memo (Input.Kept): same configuration as the last one, no zone.
func (m *Memo) Reuses(in Input) bool {
	return m != nil && in.Zone == "" && m.started && m.cfg.equal(in.Config)
}

// Reusable reports whether es can be given as Input.Kept: the Memo holds
// its result computed from these very objects (the Service and endpoints
// the caller has for it now, its host's parse and gateway facts).
func (m *Memo) Reusable(es *egressv1.EgressService, svc *corev1.Service, eps []Endpoint, host *NodeInfo, gw GatewayInfo, gwOK bool) bool {
	if m == nil {
		return false
	}
	e := m.services[es]
	if e == nil {
		return false
	}
	if m.hosts == nil {
		m.hosts = map[[2]*NodeInfo]bool{}
	}
	return m.reusable(e, svc, eps, host, gw, gwOK)
}

// kept returns the memoized service of an Input.Kept entry (nil: the Memo
// does not hold it). The caller vouched for its Service and endpoints; its
// host and gateway are checked again, being at hand.
func (m *Memo) kept(t *translator, es *egressv1.EgressService) *service {
	if m == nil {
		return nil
	}
	m.stats.Services++
	e := m.services[es]
	if e == nil {
		return nil
	}
	gw, gwOK := t.in.Gateways[es.Status.Host]
	if !m.reusable(e, e.svc, e.eps, t.in.Nodes[es.Status.Host], gw, gwOK) {
		return nil
	}
	m.stats.ServicesReused++
	return e.s
}

// ownerMap returns an empty map for resolveConflicts, reused between
// translations when there is a Memo.
func (m *Memo) ownerMap(n int) map[netip.Addr]int32 {
	if m == nil {
		return make(map[netip.Addr]int32, n)
	}
	if m.owner == nil {
		m.owner = make(map[netip.Addr]int32, n)
	}
	clear(m.owner)
	return m.owner
}

// sameHost reports whether two parses of a service's host agree on all a
// hosted service's translation reads from it: the name, gateway mode,
// management, join and host addresses, and the agent's report of this service.
func (m *Memo) sameHost(old, cur *NodeInfo, key string) bool {
	if old == cur {
		return true
	}
	if old == nil || cur == nil {
		return false
	}
	pair := [2]*NodeInfo{old, cur}
	same, ok := m.hosts[pair]
	if !ok {
		same = old.Name == cur.Name && old.GatewayMode == cur.GatewayMode &&
			maps.Equal(old.MgmtIPs, cur.MgmtIPs) && maps.Equal(old.JoinIPs, cur.JoinIPs) && slices.Equal(old.HostIPs, cur.HostIPs)
		m.hosts[pair] = same
	}
	if !same {
		return false
	}
	r1, ok1 := old.Report[key]
	r2, ok2 := cur.Report[key]
	return ok1 == ok2 && r1.Network == r2.Network && r1.Endpoints == r2.Endpoints && slices.Equal(r1.IngressIPs, r2.IngressIPs)
}

// store keeps a freshly computed service, or forgets what was kept of it
// when its result is not memoizable.
func (m *Memo) store(t *translator, s *service) {
	if m == nil {
		return
	}
	if !s.memoizable {
		m.Forget(s.key)
		return
	}
	c := *s
	c.fromMemo = true
	e := &memoService{key: s.key, svc: s.svc, eps: t.in.Endpoints[s.key], host: t.in.Nodes[s.es.Status.Host], s: &c}
	e.gw, e.gwOK = t.in.Gateways[s.es.Status.Host]
	for _, p := range s.parts {
		p.owner = e
	}
	m.Forget(s.key)
	m.services[s.es], m.byKey[s.key] = e, s.es
}

// sameSlice reports whether a and b are the same slice (not just equal).
func sameSlice[T any](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

func (c Config) equal(o Config) bool {
	return slices.Equal(c.ClusterSubnets, o.ClusterSubnets) && slices.Equal(c.JoinSubnets, o.JoinSubnets) &&
		slices.Equal(c.ServiceCIDRs, o.ServiceCIDRs) && c.ReroutePriority == o.ReroutePriority &&
		c.AllowPriority == o.AllowPriority && c.Backend == o.Backend && c.UnassignedTraffic == o.UnassignedTraffic &&
		c.AssumeAgentsReady == o.AssumeAgentsReady && c.NATMatch == o.NATMatch
}

func (g GatewayInfo) equal(o GatewayInfo) bool {
	return maps.Equal(g.JoinIPs, o.JoinIPs) && g.NATAddressesRouter == o.NATAddressesRouter && g.ExternalPortKnown == o.ExternalPortKnown &&
		maps.Equal(g.SNAT, o.SNAT)
}
