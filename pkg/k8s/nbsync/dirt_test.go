package nbsync

import (
	"maps"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestDirtWalksInFullUnlessOnlyMovesHappened: a key dirtied by moves alone
// is taken with its moved services; any other reason, before or after the
// moves, walks it in full, and so do keys that are not nodes'; a key taken
// once has no record left (its next sync, a retry, walks it in full).
func TestDirtWalksInFullUnlessOnlyMovesHappened(t *testing.T) {
	d := newDirt()
	n1, n2, n3 := translate.NodeKey("node1"), translate.NodeKey("node2"), translate.NodeKey("node3")
	d.moved(n1, "ns/a")
	d.moved(n1, "ns/b")
	d.moved(n2, "ns/a")
	d.full(n2)
	d.full(n3)
	d.moved(n3, "ns/c")
	d.moved(translate.UnassignedKey, "ns/a")
	keys := []translate.Key{n1, n2, n3, translate.UnassignedKey, translate.ClusterKey}
	got := d.take(keys)
	want := map[translate.Key]map[string]bool{n1: {"ns/a": true, "ns/b": true}}
	if !maps.EqualFunc(got, want, maps.Equal) {
		t.Fatalf("took %v, want %v", got, want)
	}
	if again := d.take(keys); len(again) != 0 {
		t.Fatalf("records left after a take: %v", again)
	}
	ks := keySet{}
	ks.move("ns/a", n1, translate.UnassignedKey)
	ks.add(n2)
	ks.move("ns/b", n1, n2)
	if ks[n1]["ns/a"] != true || ks[n1]["ns/b"] != true || ks[n2] != nil || ks[translate.UnassignedKey] != nil {
		t.Fatalf("keySet %v: want node1 moved by ns/a and ns/b, node2 and unassigned in full", ks)
	}
}
