package translate

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
)

// keptInput splits in the way the master's gather does: the EgressServices
// the Memo accepts as Reusable and that share no endpoint address with
// another Service go to Kept (each with probability 1/2, so that kept and
// given services mix), without their Service and endpoints; the rest stay.
func (m *memoWorld) keptInput(memo *Memo) (Input, map[string]bool) {
	in := m.in
	in.Memo = memo
	kept := map[string]bool{}
	if !memo.Reuses(in) {
		return in, kept
	}
	owners := map[string]map[string]bool{} // address -> Services with it in a slice
	for key, ss := range m.in.EndpointSlices {
		for _, s := range ss {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					if owners[a] == nil {
						owners[a] = map[string]bool{}
					}
					owners[a][key] = true
				}
			}
		}
	}
	shares := func(key string) bool {
		for _, s := range m.in.EndpointSlices[key] {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					if len(owners[a]) > 1 {
						return true
					}
				}
			}
		}
		return false
	}
	in.EgressServices, in.Kept = nil, nil
	in.Services = maps.Clone(m.in.Services)
	in.Endpoints = maps.Clone(m.in.Endpoints)
	in.EndpointSlices = maps.Clone(m.in.EndpointSlices)
	for _, es := range m.in.EgressServices {
		key := EgressServiceKey(es)
		gw, gwOK := m.in.Gateways[es.Status.Host]
		if m.r.IntN(2) == 0 && !shares(key) &&
			memo.Reusable(es, m.in.Services[key], m.in.Endpoints[key], m.in.Nodes[es.Status.Host], gw, gwOK) {
			in.Kept = append(in.Kept, es)
			kept[key] = true
			delete(in.Services, key)
			delete(in.Endpoints, key)
			delete(in.EndpointSlices, key)
			continue
		}
		in.EgressServices = append(in.EgressServices, es)
	}
	return in, kept
}

func problemsExcept(ps Problems, skip map[string]bool) Problems {
	out := slices.DeleteFunc(slices.Clone(ps), func(p Problem) bool { return skip[p.Key] })
	if len(out) == 0 {
		return nil
	}
	return out
}

// TestKeptServicesNeverChangeTheResult: translating with part of the
// services given as Input.Kept (their Services and endpoints absent) gives
// the rows of a fresh translation of everything, at every step of random
// clusters, and the problems of every service that was given.
func TestKeptServicesNeverChangeTheResult(t *testing.T) {
	var total MemoStats
	kept := 0
	for seed := range uint64(150) {
		m := newMemoWorld(seed)
		memo := NewMemo()
		var history []string
		for range 40 {
			history = append(history, m.step(memo))
			m.in.Only = m.only()
			with, k := m.keptInput(memo)
			kept += len(k)
			want := Translate(m.in)
			got := Translate(with)
			st := memo.Stats()
			total.ServicesReused += st.ServicesReused
			total.SetsReused += st.SetsReused
			total.SetsPatched += st.SetsPatched
			if got.Stale {
				t.Fatalf("seed %d, after %v: stale with %d kept", seed, history, len(k))
			}
			if !reflect.DeepEqual(got.Rows, want.Rows) || got.ReleaseClusterRoutes != want.ReleaseClusterRoutes ||
				!reflect.DeepEqual(problemsExcept(got.Problems, k), problemsExcept(want.Problems, k)) {
				wy, _ := YAML(want)
				gy, _ := YAML(got)
				t.Fatalf("seed %d, after %v, kept %v:\nwith the memo:\n%s\nwithout:\n%s", seed, history, slices.Sorted(maps.Keys(k)), gy, wy)
			}
		}
	}
	if kept == 0 || total.SetsPatched == 0 {
		t.Fatalf("nothing was kept or patched: %d kept, %+v", kept, total)
	}
	t.Logf("%d services kept; reused %d services and %d sets, patched %d sets", kept, total.ServicesReused, total.SetsReused, total.SetsPatched)
}

// TestADrainCostsTheMovedServices: on hosts of 50 services each, moving
// two services between two hosts with the rest kept resolves only the two
// and patches both sets; a Kept service the Memo lost (a new configuration)
// makes the result stale instead of leaving its addresses out.
func TestADrainCostsTheMovedServices(t *testing.T) {
	w := twoHosts(100)
	memo := NewMemo()
	w.in.Memo = memo
	Translate(w.in)
	for i := range 2 {
		moved := w.in.EgressServices[i].DeepCopy()
		moved.Status.Host = map[string]string{"node1": "node2", "node2": "node1"}[moved.Status.Host]
		w.in.EgressServices[i] = moved
	}
	in := w.in
	in.EgressServices = w.in.EgressServices[:2]
	in.Kept = w.in.EgressServices[2:]
	got := Translate(in)
	st := memo.Stats()
	if st.Services != 100 || st.ServicesReused != 98 || st.SetsPatched != 2 || got.Stale {
		t.Fatalf("after two moves: %+v (stale %v), want 98 of 100 services reused and 2 sets patched", st, got.Stale)
	}
	w.in.Memo = nil
	if want := Translate(w.in); !reflect.DeepEqual(got.Rows, want.Rows) {
		t.Fatal("the rows differ from a fresh translation")
	}
	in.Config.ReroutePriority++
	if !Translate(in).Stale {
		t.Fatal("kept services the Memo no longer holds: not stale")
	}
}

// twoHosts is n services of one endpoint each, hosted alternately on node1
// and node2, agents taken as ready, endpoints given as the controller gives
// them.
func twoHosts(n int) *world {
	w := newWorld(2)
	w.in.Config.AssumeAgentsReady = true
	w.in.Endpoints = map[string][]Endpoint{}
	for s := range n {
		key := fmt.Sprintf("ns/svc%03d", s)
		node := 1 + s%2
		w.es(key, fmt.Sprintf("node%d", node))
		w.svc(key, "172.18.1.1")
		w.eps(key, fmt.Sprintf("10.244.%d.%d@node%d", node, 10+s, node))
		w.in.Endpoints[key] = ServiceEndpoints(w.in.Services[key], w.in.EndpointSlices[key], w.in.Config.ClusterSubnets)
	}
	return w
}
