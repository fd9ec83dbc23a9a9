package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"maps"
	"net/netip"
	"reflect"
	"slices"
)

// Index holds the EgressService rows of a cluster (or of one interconnect
// zone) and keeps them current one change at a time: the translation
// controller's model. Each change names what changed — an EgressService
// with its Service and slices (SetService, DeleteService), a node
// (SetNode), a gateway router's facts (SetGateway), the zone's facts
// (SetZoneFacts), an address set's members in NB (RefreshMembers) — and
// the Index translates again exactly the EgressServices whose result reads
// it, with the same per-service translation Translate uses, then moves
// their contributions: out of each set under their previous result, into
// each set under the new one. Touched returns the keys whose rows that
// changed; Rows renders any key.
//
// What a service's result reads is explicit data kept beside it:
//   - its own objects (SetService);
//   - the winner of each endpoint address it claims (claims: an address
//     two EgressServices claim goes to the first by namespace, then name);
//   - the nodes it read (its host; in Network mode or a zone its
//     endpoints' nodes), compared by everything translation reads of a
//     node (nodeFacts) and by its own entry of the node's report;
//   - the gateway facts of those nodes;
//   - NB's members of its host's sets while that host's agent is behind;
//   - every node's pod subnets, for a service with an endpoint outside the
//     cluster subnets (the problem names the node whose subnet holds it).
//
// Translate(in) builds a fresh Index of the whole input: after any
// sequence of changes an Index renders the same rows as Translate of the
// world as it stands (TestIndexIsTranslate, and the controller's
// TestTranslationOracle). An Index is not safe for concurrent use; the
// rows it renders share memory with it and must not be modified.
type Index struct {
	w        facts
	services map[string]*indexed
	claims   *claimIndex
	sets     map[setKey]*setState
	// byKey are the sets under each key.
	byKey map[translate.Key]map[setKey]struct{}
	// readers are, per node, the services whose result read its facts;
	// nbReaders those that read NB's members of its sets; outside the
	// services that read every node's pod subnets.
	readers, nbReaders map[string]map[string]struct{}
	outside            map[string]struct{}
	// routes are, per host of this zone, the services it routes the
	// cluster's pod traffic for (interconnect).
	routes  map[string]map[string]struct{}
	zone    ZoneFacts
	touched map[translate.Key]bool
	// translated are the services translated since Translated was called.
	translated map[string]bool
}

type indexed struct {
	entry *serviceEntry
	res   *result
}

// ZoneFacts are what an interconnect zone's cluster routes read besides its
// hosts (Input's fields of the same names).
type ZoneFacts struct {
	ForeignClusterRoutes map[netip.Prefix]bool
	ClusterRouteShared   bool
	EgressNodes          map[string]bool
}

// NewIndex returns an empty Index for one configuration and zone ("" for
// the central NB); current reads NB's members of owned sets (nil: none).
func NewIndex(cfg translate.Config, zone string, current Members) *Index {
	x := &Index{
		w:        facts{cfg: cfg, zone: zone, nodes: map[string]*translate.NodeInfo{}, gateways: map[string]translate.GatewayInfo{}, current: current},
		services: map[string]*indexed{}, claims: newClaimIndex(), sets: map[setKey]*setState{}, byKey: map[translate.Key]map[setKey]struct{}{},
		readers: map[string]map[string]struct{}{}, nbReaders: map[string]map[string]struct{}{}, outside: map[string]struct{}{},
		routes: map[string]map[string]struct{}{}, touched: map[translate.Key]bool{translate.ClusterKey: true}, translated: map[string]bool{},
	}
	if cfg.UnassignedTraffic == translate.UnassignedDrop {
		x.touch(translate.UnassignedKey) // its drop rows exist from the start
	}
	return x
}

// Config is the configuration the Index translates with.
func (x *Index) Config() translate.Config { return x.w.cfg }

// SetService records an EgressService with its Service (nil: none) and the
// Service's EndpointSlices as they are now.
func (x *Index) SetService(objs ServiceObjects) {
	key := translate.EgressServiceKey(objs.EgressService)
	it := x.services[key]
	if it == nil {
		it = &indexed{}
		x.services[key] = it
	}
	var e *serviceEntry
	if it.entry != nil && sameVersions(it.entry.ServiceObjects, objs) {
		// The Service and its slices are the versions parsed last time
		// (only the EgressService changed: a move): their parse stands.
		c := *it.entry
		c.ServiceObjects = objs
		e = &c
	} else {
		e = newServiceEntry(x.w.cfg, objs)
	}
	var old []translate.Endpoint
	if it.entry != nil {
		old = it.entry.claims
	}
	it.entry = e
	setMember(x.outside, e.key, e.outside)
	affected := x.claims.update(e.key, old, e.claims)
	x.recompute(e.key)
	for _, k := range affected {
		x.recompute(k)
	}
}

// DeleteService forgets the EgressService "namespace/name".
func (x *Index) DeleteService(key string) {
	it := x.services[key]
	if it == nil {
		return
	}
	var affected []string
	if it.entry != nil {
		affected = x.claims.update(key, it.entry.claims, nil)
	}
	it.entry = nil
	delete(x.outside, key)
	x.recompute(key)
	delete(x.services, key)
	for _, k := range affected {
		x.recompute(k)
	}
}

// SetNode records a node's parse (nil: the node is gone).
func (x *Index) SetNode(name string, n *translate.NodeInfo) {
	old, had := x.w.nodes[name]
	if n == nil {
		if !had {
			return
		}
		delete(x.w.nodes, name)
	} else {
		x.w.nodes[name] = n
	}
	if had && n != nil && reflect.DeepEqual(nodeFacts(old), nodeFacts(n)) {
		// Only the report (or what translation does not read) changed:
		// the services whose own entry changed.
		for _, svc := range sortedMembers(x.readers[name]) {
			if !reflect.DeepEqual(reportEntry(old, svc), reportEntry(n, svc)) {
				x.recompute(svc)
			}
		}
		return
	}
	if x.w.zone != "" && inZone(x.w.zone, old) != inZone(x.w.zone, n) {
		x.zoneMembershipChanged(name)
	}
	x.touch(translate.NodeKey(name)) // its cluster routes read its join addresses
	if old == nil || n == nil || !slices.Equal(old.HostIPs, n.HostIPs) {
		x.touch(translate.ClusterKey)
	}
	if old == nil || n == nil || !slices.Equal(old.Subnets, n.Subnets) {
		x.w.podSubnets = nil
		for _, svc := range sortedMembers(x.outside) {
			x.recompute(svc)
		}
	}
	for _, svc := range sortedMembers(x.readers[name]) {
		x.recompute(svc)
	}
}

// inZone reports whether a node's parse (nil: no node) is in zone.
func inZone(zone string, n *translate.NodeInfo) bool { return n != nil && n.ZoneName() == zone }

// zoneMembershipChanged translates again, in a zone, the services with an
// endpoint on node: which of their endpoints the zone reroutes changed.
func (x *Index) zoneMembershipChanged(node string) {
	var affected []string
	for key, it := range x.services {
		if it.entry == nil {
			continue
		}
		for _, e := range it.entry.claims {
			if e.Node == node {
				affected = append(affected, key)
				break
			}
		}
	}
	slices.Sort(affected)
	for _, svc := range affected {
		x.recompute(svc)
	}
}

// nodeFacts is what translation reads of a node but the report (compared
// per service): all of it but its labels, readiness and parse problems,
// which are host selection's.
func nodeFacts(n *translate.NodeInfo) translate.NodeInfo {
	f := *n
	f.Labels, f.Ready, f.Problems, f.Report = nil, false, nil, nil
	return f
}

func reportEntry(n *translate.NodeInfo, svc string) any {
	r, ok := n.Report[svc]
	if !ok {
		return nil
	}
	return r
}

// SetGateway records the facts NB has of a node's gateway router (ok false:
// none).
func (x *Index) SetGateway(node string, gw translate.GatewayInfo, ok bool) {
	old, had := x.w.gateways[node]
	if had == ok && (!ok || reflect.DeepEqual(old, gw)) {
		return
	}
	if ok {
		x.w.gateways[node] = gw
	} else {
		delete(x.w.gateways, node)
	}
	x.touch(translate.NodeKey(node))
	for _, svc := range sortedMembers(x.readers[node]) {
		x.recompute(svc)
	}
}

// SetZoneFacts records the zone's cluster-route facts.
func (x *Index) SetZoneFacts(z ZoneFacts) {
	if reflect.DeepEqual(x.zone, z) {
		return
	}
	x.zone = z
	for name := range x.w.nodes {
		if x.w.inZone(name) {
			x.touch(translate.NodeKey(name))
		}
	}
}

// RefreshMembers says NB's members of node's sets changed: the services
// that read them (their host's agent is behind) are translated again.
func (x *Index) RefreshMembers(node string) {
	for _, svc := range sortedMembers(x.nbReaders[node]) {
		x.recompute(svc)
	}
}

// Touched returns the keys whose rows may have changed since the last
// call, sorted.
func (x *Index) Touched() []translate.Key {
	out := slices.Sorted(maps.Keys(x.touched))
	clear(x.touched)
	return out
}

// Keys returns every key that has rows, sorted.
func (x *Index) Keys() []translate.Key {
	keys := map[translate.Key]bool{translate.ClusterKey: true}
	if x.w.cfg.UnassignedTraffic == translate.UnassignedDrop {
		keys[translate.UnassignedKey] = true
	}
	for k := range x.byKey {
		keys[k] = true
	}
	for n := range x.routes {
		keys[translate.NodeKey(n)] = true
	}
	for n := range x.zone.EgressNodes {
		keys[translate.NodeKey(n)] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

// Problems returns the problems of the EgressService "namespace/name".
func (x *Index) Problems(key string) []translate.Problem {
	if it := x.services[key]; it != nil && it.res != nil {
		return it.res.problems
	}
	return nil
}

// ServingHost returns the host whose sets reroute some of the
// EgressService's endpoints (ok false: none).
func (x *Index) ServingHost(svc string) (host string, ok bool) {
	if it := x.services[svc]; it != nil && it.res != nil {
		for _, c := range it.res.parts {
			if (c.set.owner == translate.OwnerHost || c.set.owner == translate.OwnerGateway) && len(c.addrs) > 0 {
				return c.set.node, true
			}
		}
	}
	return "", false
}

// ServedBy returns the EgressServices whose endpoints host's sets reroute
// (some of them at least), sorted.
func (x *Index) ServedBy(host string) []string {
	var out []string
	for k := range x.byKey[translate.NodeKey(host)] {
		if k.owner != translate.OwnerHost && k.owner != translate.OwnerGateway {
			continue
		}
		for svc, c := range x.sets[k].parts {
			if len(c.addrs) > 0 {
				out = append(out, svc)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Translated returns the EgressServices translated since the last call
// (their problems may have changed), sorted.
func (x *Index) Translated() []string {
	out := slices.Sorted(maps.Keys(x.translated))
	clear(x.translated)
	return out
}

// Services returns the EgressServices the Index holds, sorted.
func (x *Index) Services() []string { return slices.Sorted(maps.Keys(x.services)) }

// Nodes returns the nodes the Index holds, sorted.
func (x *Index) Nodes() []string { return slices.Sorted(maps.Keys(x.w.nodes)) }

// recompute translates one EgressService again with what the Index holds,
// and moves its contributions and what it read from its previous result to
// the new one.
func (x *Index) recompute(key string) {
	it := x.services[key]
	if it == nil {
		return
	}
	var res *result
	if it.entry != nil {
		res = x.w.translateService(it.entry, x.claims.winner)
	}
	x.replace(key, it.res, res)
	it.res = res
	x.translated[key] = true
}

// replace moves a service's contributions from its old result to its new
// one (nil: none): a set whose contribution is the same as before is left
// as it was.
func (x *Index) replace(svc string, old, cur *result) {
	before := map[setKey]*contribution{}
	if old != nil {
		for _, c := range old.parts {
			before[c.set] = c
		}
		x.unlink(svc, old)
	}
	if cur != nil {
		for i, c := range cur.parts {
			prev, ok := before[c.set]
			delete(before, c.set)
			if ok && reflect.DeepEqual(prev, c) {
				cur.parts[i] = prev // the same contribution: nothing to render again
				continue
			}
			if ok {
				x.unmerge(prev)
			}
			x.merge(c)
		}
		x.link(svc, cur)
	}
	for _, c := range before {
		x.unmerge(c)
	}
}

// link and unlink record what a result read, and the hosts it routes for.
func (x *Index) link(svc string, r *result) {
	for _, n := range r.reads {
		addMember(x.readers, n, svc)
	}
	for _, n := range r.readsNB {
		addMember(x.nbReaders, n, svc)
	}
	if r.route != "" {
		if len(x.routes[r.route]) == 0 {
			x.touch(translate.NodeKey(r.route))
		}
		addMember(x.routes, r.route, svc)
	}
}

func (x *Index) unlink(svc string, r *result) {
	for _, n := range r.reads {
		removeMember(x.readers, n, svc)
	}
	for _, n := range r.readsNB {
		removeMember(x.nbReaders, n, svc)
	}
	if r.route != "" {
		removeMember(x.routes, r.route, svc)
		if len(x.routes[r.route]) == 0 {
			x.touch(translate.NodeKey(r.route))
		}
	}
}

func (x *Index) touch(k translate.Key) { x.touched[k] = true }

// claimIndex maps each endpoint address to the EgressServices claiming it:
// one compact map entry (16-byte address, a service number) for an address
// one service claims (nearly all: 150,000 at the envelope, in every zone's
// agent), a sorted list for an address several claim.
type claimIndex struct {
	one  map[[16]byte]int32
	many map[[16]byte][]string
	// ids number the services that claim (never reused: a number is a
	// name for as long as the Index lives).
	ids   map[string]int32
	names []string
}

func newClaimIndex() *claimIndex {
	return &claimIndex{one: map[[16]byte]int32{}, many: map[[16]byte][]string{}, ids: map[string]int32{}}
}

func (c *claimIndex) id(svc string) int32 {
	if id, ok := c.ids[svc]; ok {
		return id
	}
	id := int32(len(c.names))
	c.ids[svc] = id
	c.names = append(c.names, svc)
	return id
}

// winner is the service an address goes to: the first of its claimants by
// namespace, then name ("" when none claims it).
func (c *claimIndex) winner(a netip.Addr) string {
	k := a.As16()
	if m := c.many[k]; m != nil {
		return m[0]
	}
	if id, ok := c.one[k]; ok {
		return c.names[id]
	}
	return ""
}

// claimants returns every service claiming a.
func (c *claimIndex) claimants(a netip.Addr) []string {
	k := a.As16()
	if m := c.many[k]; m != nil {
		return m
	}
	if id, ok := c.one[k]; ok {
		return []string{c.names[id]}
	}
	return nil
}

// update replaces svc's claims (old and cur sorted by address, as
// ServiceEndpoints returns them) and returns the other services whose won
// claims changed: the claimants of an address whose winner changed.
func (c *claimIndex) update(svc string, old, cur []translate.Endpoint) []string {
	var affected []string
	changed := func(a netip.Addr, edit func()) {
		before := c.winner(a)
		edit()
		if after := c.winner(a); after != before {
			for _, s := range c.claimants(a) {
				if s != svc {
					affected = append(affected, s)
				}
			}
		}
	}
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case j == len(cur) || (i < len(old) && old[i].IP.Compare(cur[j].IP) < 0):
			a := old[i].IP
			changed(a, func() { c.remove(a, svc) })
			i++
		case i == len(old) || cur[j].IP.Compare(old[i].IP) < 0:
			a := cur[j].IP
			changed(a, func() { c.add(a, svc) })
			j++
		default: // claimed before and now
			i++
			j++
		}
	}
	slices.SortFunc(affected, compareServiceKeys)
	return slices.Compact(affected)
}

func (c *claimIndex) add(a netip.Addr, svc string) {
	k := a.As16()
	if m := c.many[k]; m != nil {
		if i, found := slices.BinarySearchFunc(m, svc, compareServiceKeys); !found {
			c.many[k] = slices.Insert(m, i, svc)
		}
		return
	}
	switch id, ok := c.one[k]; {
	case !ok:
		c.one[k] = c.id(svc)
	case c.names[id] != svc:
		delete(c.one, k)
		m := []string{c.names[id], svc}
		slices.SortFunc(m, compareServiceKeys)
		c.many[k] = m
	}
}

func (c *claimIndex) remove(a netip.Addr, svc string) {
	k := a.As16()
	if m := c.many[k]; m != nil {
		m = slices.DeleteFunc(m, func(s string) bool { return s == svc })
		if len(m) == 1 {
			delete(c.many, k)
			c.one[k] = c.id(m[0])
		} else {
			c.many[k] = m
		}
		return
	}
	if id, ok := c.one[k]; ok && c.names[id] == svc {
		delete(c.one, k)
	}
}

func addMember(m map[string]map[string]struct{}, k, member string) {
	s := m[k]
	if s == nil {
		s = map[string]struct{}{}
		m[k] = s
	}
	s[member] = struct{}{}
}

func removeMember(m map[string]map[string]struct{}, k, member string) {
	if s := m[k]; s != nil {
		delete(s, member)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}

func setMember(m map[string]struct{}, k string, in bool) {
	if in {
		m[k] = struct{}{}
	} else {
		delete(m, k)
	}
}

// sortedMembers copies a member set, sorted (recomputing changes the sets).
func sortedMembers(s map[string]struct{}) []string {
	return slices.Sorted(maps.Keys(s))
}
