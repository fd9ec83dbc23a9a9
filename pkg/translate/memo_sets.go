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

// memoSet is what the Memo keeps of one set's last rendering.
type memoSet struct {
	nexthop  netip.Addr
	parts    map[*contribution]struct{}
	rendered *renderedSet
}

// set returns the rendered rows of one accumulated set.
func (m *Memo) set(t *translator, k setKey, acc *setAcc) *renderedSet {
	if m == nil {
		return t.render(k, acc)
	}
	m.stats.Sets++
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
		rs = t.patch(k, acc, e, parts)
	}
	if rs != nil {
		m.stats.SetsPatched++
	} else {
		rs = t.render(k, acc)
	}
	m.sets[k] = &memoSet{nexthop: acc.nexthop, parts: parts, rendered: rs}
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

// patch renders a set from its last rendering (old) when few contributions
// came or went; nil when it must be rendered afresh: a large change, an
// address two contributions share, or NAT rows with matches (Config.NATMatch).
// The result equals render's; old is left as it was (earlier results share it).
func (t *translator) patch(k setKey, acc *setAcc, old *memoSet, parts map[*contribution]struct{}) *renderedSet {
	prev := old.rendered
	if !prev.patchable {
		return nil
	}
	var added, removed []*contribution
	for _, c := range acc.parts {
		if _, ok := old.parts[c]; !ok {
			added = append(added, c)
		}
	}
	for c := range old.parts {
		if _, ok := parts[c]; !ok {
			removed = append(removed, c)
		}
	}
	if 2*(len(added)+len(removed)) > len(acc.parts) {
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
