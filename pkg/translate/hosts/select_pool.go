package hosts

import (
	"container/heap"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// A pool is the nodes one node selector admits, computed once per distinct
// selector in a SelectHosts call rather than once per EgressService: most
// EgressServices of a cluster share a handful of selectors (often the empty
// one), so the node scan costs selectors × nodes instead of services × nodes
// (10,000 × 5,000 label matches at the scalability envelope,
// docs/performance.md §7.4). The least-loaded candidate comes from a heap
// over the pool, so a placement costs log(nodes), not nodes.
type pool struct {
	// matching are the Ready nodes the selector matches, by name: those an
	// externalTrafficPolicy Local service intersects with its endpoint nodes.
	matching map[string]bool
	// candidates are the matching nodes that are reachable, sorted.
	candidates []string
	// excluded counts the nodes that are not candidates, by first failing
	// test, for an EgressService without endpoint-node restriction.
	excluded exclusions
	// order is the candidates by (recovering, allocations, name), built at
	// the first placement from the pool.
	order *loadHeap
}

// poolOf returns the pool of sel, scanning the nodes at its first use.
// labels.Selector.String is canonical (requirements sorted), so two
// nodeSelectors that select alike share a pool.
func (s *selector) poolOf(sel labels.Selector) *pool {
	k := sel.String()
	if p := s.pools[k]; p != nil {
		return p
	}
	p := &pool{matching: map[string]bool{}}
	for _, name := range s.nodes {
		n := s.in.Nodes[name]
		switch {
		case !n.Ready:
			p.excluded.notReady++
		case !sel.Matches(labels.Set(n.Labels)):
			p.excluded.noMatch++
		default:
			p.matching[name] = true
			if s.reachable(name) {
				p.candidates = append(p.candidates, name)
			} else {
				p.excluded.unreachable++
			}
		}
	}
	if s.pools == nil {
		s.pools = map[string]*pool{}
	}
	s.pools[k] = p
	return p
}

// local narrows the pool to the nodes with an endpoint of the Service
// (externalTrafficPolicy Local): it walks the endpoint nodes, not the pool,
// and returns the candidates sorted and the exclusions in the order exclude
// tests them (not Ready, no match, no local endpoint, unreachable).
func (p *pool) local(nodes map[string]bool, reachable func(string) bool) ([]string, exclusions) {
	ex := exclusions{notReady: p.excluded.notReady, noMatch: p.excluded.noMatch}
	var out []string
	inPool := 0
	for name := range nodes {
		if !p.matching[name] {
			continue
		}
		inPool++
		if reachable(name) {
			out = append(out, name)
		} else {
			ex.unreachable++
		}
	}
	ex.noLocal = len(p.matching) - inPool
	slices.Sort(out)
	return out, ex
}

// least returns the pool's candidate with the fewest allocations, a
// Recovering node only when no other is left, ties by name; "" when the pool
// has none. Allocations only grow during a SelectHosts call, so a heap entry
// is at worst too low: the top is refreshed until it is current (a lazy
// decrease-key), and the top is then the true minimum.
func (s *selector) least(p *pool) string {
	if len(p.candidates) == 0 {
		return ""
	}
	if p.order == nil {
		h := &loadHeap{}
		for _, name := range p.candidates {
			h.items = append(h.items, load{name: name, recovering: s.in.Recovering[name], n: s.res.Allocations[name]})
		}
		heap.Init(h)
		p.order = h
	}
	h := p.order
	for {
		top := &h.items[0]
		if cur := s.res.Allocations[top.name]; cur != top.n {
			top.n = cur
			heap.Fix(h, 0)
			continue
		}
		return top.name
	}
}

// load is a heap entry: a candidate and its allocations when last looked at.
type load struct {
	name       string
	recovering bool
	n          int
}

// loadHeap orders candidates as place chooses them: steady before
// Recovering, fewer allocations first, then by name.
type loadHeap struct{ items []load }

func (h *loadHeap) Len() int { return len(h.items) }
func (h *loadHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.recovering != b.recovering {
		return !a.recovering
	}
	if a.n != b.n {
		return a.n < b.n
	}
	return a.name < b.name
}
func (h *loadHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *loadHeap) Push(x any)    { h.items = append(h.items, x.(load)) }
func (h *loadHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return last
}
