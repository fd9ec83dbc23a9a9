package main

import (
	"slices"
	"testing"
	"time"
)

// TestMirrorSetDiffs: a monitor_cond "modify" of a set column toggles the
// elements it names (a single element comes as a bare atom); atomic
// columns are replaced; the derived index follows.
func TestMirrorSetDiffs(t *testing.T) {
	m := newMirror()
	sets := setIndex{}
	m.hook = func(table string, old, cur map[string]any) { sets.update(old, cur) }
	m.setColumns["Address_Set"] = map[string]bool{"addresses": true}
	for _, n := range []string{
		`[null, {"Address_Set": {"u1": {"insert": {"name": "a", "addresses": ["set", ["10.0.0.1", "10.0.0.2"]]}}}}]`,
		`[null, {"Address_Set": {"u1": {"modify": {"addresses": ["set", ["10.0.0.2", "10.0.0.3"]]}}}}]`,
		`[null, {"Address_Set": {"u1": {"modify": {"addresses": "10.0.0.4"}}}}]`,
		`[null, {"Address_Set": {"u1": {"modify": {"name": "b"}}}}]`,
	} {
		m.notify("update2", []byte(n), time.Now())
	}
	var got []string
	for a := range sets["b"] {
		got = append(got, a)
	}
	slices.Sort(got)
	if want := []string{"10.0.0.1", "10.0.0.3", "10.0.0.4"}; !slices.Equal(got, want) || len(sets) != 1 {
		t.Fatalf("sets %v, want only b = %v", sets, want)
	}
	m.notify("update2", []byte(`[null, {"Address_Set": {"u1": {"delete": null}}}]`), time.Now())
	if len(sets) != 0 {
		t.Fatalf("deleted set still indexed: %v", sets)
	}
}
