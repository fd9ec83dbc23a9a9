package nbsync

import (
	"slices"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// addressIndex maps each endpoint address to the EndpointSlices that hold
// it ("namespace/name"), as the slice handlers see them. Two EgressServices
// decide a conflict together only through an address in more than one
// slice, and such addresses are rare, so gather looks at them instead of at
// every address of every service. It replaces client-go's indexer by
// address, which kept a set per address: at 5,000 nodes a quarter of an
// agent's heap, for a set that nearly always holds one slice. Here an
// address in one slice costs one map entry.
type addressIndex struct {
	mu sync.Mutex
	// one holds an address in exactly one slice, many one in several.
	one  map[string]string
	many map[string]map[string]bool
}

func newAddressIndex() *addressIndex {
	return &addressIndex{one: map[string]string{}, many: map[string]map[string]bool{}}
}

// update replaces the addresses of a slice, from old to cur (nil: none).
// The handlers of one informer see a slice's changes in order, so old is
// what was indexed last.
func (x *addressIndex) update(old, cur *discoveryv1.EndpointSlice) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old != nil {
		key := old.Namespace + "/" + old.Name
		for _, e := range old.Endpoints {
			for _, a := range e.Addresses {
				x.remove(a, key)
			}
		}
	}
	if cur != nil {
		key := cur.Namespace + "/" + cur.Name
		for _, e := range cur.Endpoints {
			for _, a := range e.Addresses {
				x.add(a, key)
			}
		}
	}
}

func (x *addressIndex) add(a, key string) {
	if m := x.many[a]; m != nil {
		m[key] = true
		return
	}
	switch k, ok := x.one[a]; {
	case !ok:
		x.one[a] = key
	case k != key:
		delete(x.one, a)
		x.many[a] = map[string]bool{k: true, key: true}
	}
}

func (x *addressIndex) remove(a, key string) {
	if m := x.many[a]; m != nil {
		delete(m, key)
		if len(m) == 1 {
			delete(x.many, a)
			for k := range m {
				x.one[a] = k
			}
		}
		return
	}
	if x.one[a] == key {
		delete(x.one, a)
	}
}

// slices returns the keys of the slices holding a, sorted.
func (x *addressIndex) slices(a string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if m := x.many[a]; m != nil {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if k, ok := x.one[a]; ok {
		return []string{k}
	}
	return nil
}

// shared returns the addresses in more than one slice, sorted.
func (x *addressIndex) shared() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]string, 0, len(x.many))
	for a := range x.many {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
