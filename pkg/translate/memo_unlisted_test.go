package translate

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// dirt is what the master's handlers record between two syncs: per key,
// either "walk it all" or the services whose status.host alone changed.
type dirt struct {
	full  map[Key]bool
	moved map[Key]map[string]bool
}

func newDirt() *dirt { return &dirt{full: map[Key]bool{}, moved: map[Key]map[string]bool{}} }

// after records what one step of a memoWorld dirtied, as the handlers
// would: a move of an EgressService between hosts of the same mode marks
// its old and new host with the service; NB's members change by the
// controller's own writes (no dirt); anything else dirties every key.
func (d *dirt) after(m *memoWorld, desc string, before map[string]*egressv1.EgressService) {
	key, ok := strings.CutPrefix(desc, "move ")
	if ok {
		key, _, _ = strings.Cut(key, " to ")
	}
	switch {
	case desc == "nothing" || strings.HasPrefix(desc, "NB members of"):
		return
	case ok && m.in.Config.UnassignedTraffic != UnassignedDrop:
		old := before[key]
		i := slices.IndexFunc(m.in.EgressServices, func(e *egressv1.EgressService) bool { return EgressServiceKey(e) == key })
		cur := m.in.EgressServices[i]
		if old.Spec.SourceIPBy == cur.Spec.SourceIPBy && old.Status.Host != egressv1.HostAll && cur.Status.Host != egressv1.HostAll {
			for _, h := range []string{old.Status.Host, cur.Status.Host} {
				if h == "" {
					continue
				}
				k := NodeKey(h)
				if d.moved[k] == nil {
					d.moved[k] = map[string]bool{}
				}
				d.moved[k][key] = true
			}
			return
		}
	}
	for _, k := range m.in.AllKeys() {
		d.full[k] = true
	}
	for _, e := range m.in.EgressServices {
		d.full[NodeKey(e.Status.Host)] = true
	}
}

// gather gives what the master's gather would for only: every service of a
// key walked in full, the moved services of the others (Unlisted), the
// Network-mode services, and every service sharing an endpoint address
// with a given one; all of them with the unassigned-traffic drop or without
// only. A key without dirt is walked in full.
func (d *dirt) gather(m *memoWorld, memo *Memo, only map[Key]bool, partial bool) (Input, map[string]bool) {
	in := m.in
	in.Memo, in.Only, in.Unlisted = memo, only, nil
	all := only == nil || m.in.Config.UnassignedTraffic == UnassignedDrop
	given := map[string]bool{}
	if !all && partial {
		in.Unlisted = map[Key]bool{}
		for k := range only {
			if d.moved[k] != nil && !d.full[k] {
				in.Unlisted[k] = true
				for s := range d.moved[k] {
					given[s] = true
				}
			}
		}
	}
	for _, e := range m.in.EgressServices {
		k := NodeKey(e.Status.Host)
		if all || e.Status.Host == egressv1.HostAll || (only[k] && !in.Unlisted[k]) {
			given[EgressServiceKey(e)] = true
		}
	}
	for grown := true; grown; {
		grown = false
		owners := map[string][]string{}
		for key, ss := range m.in.EndpointSlices {
			for _, a := range sliceAddrs(ss) {
				owners[a] = append(owners[a], key)
			}
		}
		for _, keys := range owners {
			if len(keys) > 1 && slices.ContainsFunc(keys, func(k string) bool { return given[k] }) {
				for _, k := range keys {
					if !given[k] {
						given[k], grown = true, true
					}
				}
			}
		}
	}
	in.EgressServices = slices.DeleteFunc(slices.Clone(m.in.EgressServices), func(e *egressv1.EgressService) bool {
		return !given[EgressServiceKey(e)]
	})
	return in, given
}

// move moves one service hosted on a node to another node, as host
// selection does when it drains a host.
func (m *memoWorld) move() (string, map[string]*egressv1.EgressService) {
	before := map[string]*egressv1.EgressService{}
	for _, e := range m.in.EgressServices {
		before[EgressServiceKey(e)] = e
	}
	i := m.r.IntN(len(m.in.EgressServices) + 1)
	if i == len(m.in.EgressServices) || m.in.EgressServices[i].Status.Host == egressv1.HostAll {
		return "nothing", before
	}
	node := fmt.Sprintf("node%d", 1+m.r.IntN(m.nodes))
	m.replaceES(i, func(e *egressv1.EgressService) { e.Status.Host = node })
	return "move " + EgressServiceKey(m.in.EgressServices[i]) + " to " + node, before
}

func sliceAddrs(ss []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		for _, e := range s.Endpoints {
			out = append(out, e.Addresses...)
		}
	}
	return out
}

// synced forgets the dirt of the keys a sync converged.
func (d *dirt) synced(only map[Key]bool) {
	if only == nil {
		clear(d.full)
		clear(d.moved)
		return
	}
	for k := range only {
		delete(d.full, k)
		delete(d.moved, k)
	}
}

// TestUnlistedHostsNeverChangeTheResult: a sync that lists only the moved
// services of hosts dirtied by moves alone (Input.Unlisted) gives the rows
// of a fresh translation of everything, at every step of random clusters;
// when the Memo cannot vouch for an unlisted host the result is Stale and
// the sync walks its keys in full, as the master does.
func TestUnlistedHostsNeverChangeTheResult(t *testing.T) {
	var unlisted, stale, partial int
	for seed := range uint64(200) {
		m := newMemoWorld(seed)
		memo := NewMemo()
		d := newDirt()
		var history []string
		for range 40 {
			before := map[string]*egressv1.EgressService{}
			for _, e := range m.in.EgressServices {
				before[EgressServiceKey(e)] = e
			}
			if m.r.IntN(2) == 0 {
				desc := m.step(memo)
				history = append(history, desc)
				d.after(m, desc, before)
			}
			// Drains: a few services move between hosts.
			for range m.r.IntN(4) {
				desc, before := m.move()
				history = append(history, desc)
				d.after(m, desc, before)
			}
			only := m.only()
			in, given := d.gather(m, memo, only, true)
			got := Translate(in)
			if len(in.Unlisted) > 0 {
				partial++
				unlisted += memo.Stats().Unlisted
			}
			if got.Stale {
				stale++
				in, given = d.gather(m, memo, only, false)
				if got = Translate(in); got.Stale {
					t.Fatalf("seed %d, after %v: stale when walked in full", seed, history)
				}
			}
			d.synced(only)
			want := m.in
			want.Only = only
			w := Translate(want)
			others := map[string]bool{}
			for _, k := range m.keys {
				others[k] = !given[k]
			}
			if !reflect.DeepEqual(got.Rows, w.Rows) || !reflect.DeepEqual(problemsExcept(got.Problems, others), problemsExcept(w.Problems, others)) {
				wy, _ := YAML(w)
				gy, _ := YAML(got)
				t.Fatalf("seed %d, after %v, unlisted %v:\nwith the memo:\n%s\nwithout:\n%s", seed, history, slices.Sorted(maps.Keys(in.Unlisted)), gy, wy)
			}
		}
	}
	if partial == 0 || unlisted == 0 || stale == partial {
		t.Fatalf("unlisted hosts were never translated from the Memo: %d partial syncs, %d stale, %d contributions kept", partial, stale, unlisted)
	}
	t.Logf("%d partial syncs (%d stale), %d contributions kept for unlisted hosts", partial, stale, unlisted)
}

// TestADrainListsOnlyTheMovedServices: on hosts of 50 services each, two
// services moved between two hosts are all a sync lists; both hosts keep
// their other 48 services from the Memo and the rows are a fresh
// translation's. A host the Memo has not translated, and a kept
// contribution of a service the Memo no longer holds, make it Stale.
func TestADrainListsOnlyTheMovedServices(t *testing.T) {
	w := twoHosts(100)
	memo := NewMemo()
	w.in.Memo = memo
	in := w.in
	in.Only, in.Unlisted = map[Key]bool{NodeKey("node1"): true, NodeKey("node2"): true}, map[Key]bool{NodeKey("node1"): true}
	if !Translate(in).Stale {
		t.Fatal("an unlisted host the Memo never translated: not stale")
	}
	Translate(w.in)
	for i := range 2 {
		moved := w.in.EgressServices[i].DeepCopy()
		moved.Status.Host = map[string]string{"node1": "node2", "node2": "node1"}[moved.Status.Host]
		w.in.EgressServices[i] = moved
	}
	in = w.in
	in.EgressServices = w.in.EgressServices[:2]
	in.Only = map[Key]bool{NodeKey("node1"): true, NodeKey("node2"): true}
	in.Unlisted = in.Only
	got := Translate(in)
	st := memo.Stats()
	if got.Stale || st.Services != 2 || st.Unlisted != 98 || st.SetsPatched != 2 {
		t.Fatalf("after two moves: %+v (stale %v), want 2 services translated, 98 contributions kept, 2 sets patched", st, got.Stale)
	}
	all := w.in
	all.Memo, all.Only = nil, in.Only
	if want := Translate(all); !reflect.DeepEqual(got.Rows, want.Rows) {
		gy, _ := YAML(got)
		wy, _ := YAML(want)
		t.Fatalf("the rows differ from a fresh translation:\n%s\nwant:\n%s", gy, wy)
	}
	memo.Forget("ns/svc050")
	if !Translate(in).Stale {
		t.Fatal("a kept contribution of a service the Memo dropped: not stale")
	}
}
