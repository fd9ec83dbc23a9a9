package translate

import (
	"net/netip"
	"slices"
)

// The Memo's address sets: a set whose contributions are the same ones as
// last time is not rendered again, and one that gained or lost a few (a
// drain moves a few services onto each host at a time) is rendered from its
// last rendering and what came and went, not afresh: its cost is that of the
// change, not of the set.

// unlisted carries the last rendering of every set of the Input.Unlisted
// hosts into t: each keeps its contributions but for the old results of the
// services given now (svcs), which were placed anew. The cost is that of
// the delta: only a set's loose contributions (memoSet.loose) are looked
// at, the others are the current results of their services. It returns
// false when the Memo cannot vouch for them: a host not translated since it
// began, a contribution that is no one's current result and whose service
// is not given (a service not memoized — a shared endpoint, a report
// behind, Network mode — or one that changed unseen), a given service's set
// reached through another nexthop, the unassigned-traffic drop (it reads
// every service) or no Memo (a zone).
func (m *Memo) unlisted(t *translator, svcs []*service) bool {
	if m == nil || t.in.Config.UnassignedTraffic == UnassignedDrop {
		return false
	}
	for k := range t.in.Unlisted {
		if !m.known[k] {
			return false
		}
	}
	var given map[string]bool // built when an old result is met
	for k, e := range m.sets {
		if !t.in.Unlisted[k.key()] {
			continue
		}
		acc := t.sets[k]
		if acc == nil {
			acc = &setAcc{nexthop: e.nexthop}
		} else if acc.nexthop != e.nexthop {
			return false
		}
		seen := map[*contribution]bool{}
		for _, c := range e.loose {
			if _, in := e.parts[c]; !in || seen[c] || (c.owner != nil && !c.owner.gone) {
				continue // gone already, met twice, or still its service's result: stays
			}
			seen[c] = true
			if given == nil {
				given = make(map[string]bool, len(svcs))
				for _, s := range svcs {
					given[s.key] = true
				}
			}
			if !given[c.svc] {
				return false
			}
			acc.removed = append(acc.removed, c)
		}
		kept := len(e.parts) - len(acc.removed)
		if kept == 0 && len(acc.parts) == 0 {
			continue // it lost its last contribution: no set
		}
		acc.carried = e
		t.sets[k] = acc
		m.stats.Unlisted += kept
	}
	return true
}

// settle records what a complete translation taught the Memo about whole
// keys: the sets of every key it output are now exactly those it rendered
// (a set that lost its last contribution is forgotten), so an Unlisted
// key may keep them later.
func (m *Memo) settle(t *translator) {
	if m == nil {
		return
	}
	out := func(k Key) bool { return t.in.Only == nil || t.in.Only[k] }
	for k := range m.sets {
		if t.sets[k] == nil && out(k.key()) {
			delete(m.sets, k)
		}
	}
	if t.in.Only == nil {
		for name := range t.in.Nodes {
			m.known[NodeKey(name)] = true
		}
		return
	}
	for k := range t.in.Only {
		m.known[k] = true
	}
}

// key is the key whose rows hold the set.
func (k setKey) key() Key {
	if k.owner == OwnerUnassigned {
		return UnassignedKey
	}
	return NodeKey(k.node)
}

// memoSet is what the Memo keeps of one set's last rendering.
type memoSet struct {
	nexthop  netip.Addr
	parts    map[*contribution]struct{}
	rendered *renderedSet
	// loose holds every part that is no one's current result (its service
	// not memoized, or its result replaced or forgotten since: Memo.Forget
	// adds it), and maybe parts gone or current again: unlisted checks.
	loose []*contribution
}

// looseOf returns the parts that are no one's current result.
func looseOf(parts []*contribution) []*contribution {
	var out []*contribution
	for _, c := range parts {
		if c.owner == nil || c.owner.gone {
			out = append(out, c)
		}
	}
	return out
}

// set returns the rendered rows of one accumulated set.
func (m *Memo) set(t *translator, k setKey, acc *setAcc) *renderedSet {
	if m == nil {
		return t.render(k, acc)
	}
	m.stats.Sets++
	if acc.carried != nil {
		return m.carriedSet(t, k, acc)
	}
	parts := make(map[*contribution]struct{}, len(acc.parts))
	for _, c := range acc.parts {
		parts[c] = struct{}{}
	}
	e := m.sets[k]
	if e != nil && e.nexthop == acc.nexthop && sameParts(e.parts, parts) {
		m.stats.SetsReused++
		return e.rendered
	}
	var rs *renderedSet
	if e != nil && e.nexthop == acc.nexthop {
		var added, removed []*contribution
		for _, c := range acc.parts {
			if _, ok := e.parts[c]; !ok {
				added = append(added, c)
			}
		}
		for c := range e.parts {
			if _, ok := parts[c]; !ok {
				removed = append(removed, c)
			}
		}
		rs = t.patch(k, e.rendered, added, removed, len(parts))
	}
	if rs != nil {
		m.stats.SetsPatched++
	} else {
		rs = t.render(k, acc)
	}
	m.sets[k] = &memoSet{nexthop: acc.nexthop, parts: parts, rendered: rs, loose: looseOf(acc.parts)}
	return rs
}

// carriedSet renders a set of an Unlisted host from its last rendering and
// the contributions that came (acc.parts not in it) and went (acc.removed),
// updating what the Memo keeps of it in place.
func (m *Memo) carriedSet(t *translator, k setKey, acc *setAcc) *renderedSet {
	e := acc.carried
	var added []*contribution
	for _, c := range acc.parts {
		if _, ok := e.parts[c]; !ok {
			added = append(added, c)
		}
	}
	// What was loose is removed now, or its service's current result again.
	e.loose = looseOf(added)
	if len(added) == 0 && len(acc.removed) == 0 {
		m.stats.SetsReused++
		return e.rendered
	}
	for _, c := range acc.removed {
		delete(e.parts, c)
	}
	for _, c := range added {
		e.parts[c] = struct{}{}
	}
	rs := t.patch(k, e.rendered, added, acc.removed, len(e.parts))
	if rs != nil {
		m.stats.SetsPatched++
	} else {
		full := &setAcc{nexthop: e.nexthop, parts: make([]*contribution, 0, len(e.parts))}
		for c := range e.parts {
			full.parts = append(full.parts, c)
		}
		rs = t.render(k, full)
	}
	e.rendered = rs
	return rs
}

func sameParts(a, b map[*contribution]struct{}) bool {
	if len(a) != len(b) {
		return false
	}
	for c := range a {
		if _, ok := b[c]; !ok {
			return false
		}
	}
	return true
}

// patch renders a set from its last rendering (prev) and the contributions
// that came and went, when they are few next to the set's total; nil when
// it must be rendered afresh: a large change, an address two contributions
// share, or NAT rows with matches (Config.NATMatch). The result equals
// render's; prev is left as it was (earlier results share it).
func (t *translator) patch(k setKey, prev *renderedSet, added, removed []*contribution, total int) *renderedSet {
	if !prev.patchable || 2*(len(added)+len(removed)) > total {
		return nil
	}
	gone := map[netip.Addr]bool{}
	for _, c := range removed {
		for _, a := range c.addrs {
			gone[a] = true
		}
	}
	var add []netip.Addr
	var addNATs []natEntry
	for _, c := range added {
		add = append(add, c.addrs...)
		addNATs = append(addNATs, c.nats...)
	}
	if t.in.Config.NATMatch && len(addNATs) > 0 {
		return nil // per-service NAT sets: rendered afresh
	}
	slices.SortFunc(add, func(a, b netip.Addr) int { return a.Compare(b) })
	addrs, strs, ok := mergeAddrs(prev.addrs, prev.set.Addresses, gone, add)
	if !ok {
		return nil
	}
	rs := &renderedSet{set: prev.set, policies: prev.policies, addrs: addrs, patchable: true}
	rs.set.Addresses = strs
	for _, n := range prev.nats {
		ep, err := netip.ParseAddr(n.LogicalIP)
		if err != nil {
			return nil // not an endpoint's row
		}
		if !gone[ep] {
			rs.nats = append(rs.nats, n)
		}
	}
	for _, e := range addNATs {
		rs.nats = append(rs.nats, endpointNAT(k, e))
	}
	return rs
}

// mergeAddrs returns the sorted addresses (and their strings) of prev
// without gone and with add (sorted); ok is false when an address would be
// there twice. The strings of addresses that stay are reused.
func mergeAddrs(prev []netip.Addr, prevStrs []string, gone map[netip.Addr]bool, add []netip.Addr) ([]netip.Addr, []string, bool) {
	n := len(prev) + len(add) - len(gone)
	addrs, strs := make([]netip.Addr, 0, max(n, 0)), make([]string, 0, max(n, 0))
	push := func(a netip.Addr, s string) bool {
		if len(addrs) > 0 && addrs[len(addrs)-1] == a {
			return false
		}
		addrs, strs = append(addrs, a), append(strs, s)
		return true
	}
	i, j := 0, 0
	for i < len(prev) || j < len(add) {
		if j < len(add) && (i == len(prev) || add[j].Compare(prev[i]) < 0) {
			if !push(add[j], add[j].String()) {
				return nil, nil, false
			}
			j++
			continue
		}
		a, s := prev[i], prevStrs[i]
		i++
		if gone[a] {
			continue
		}
		if !push(a, s) {
			return nil, nil, false
		}
	}
	return addrs, strs, true
}
