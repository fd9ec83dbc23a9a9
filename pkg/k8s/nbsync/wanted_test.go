package nbsync

import (
	"fmt"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

func TestWantedSets(t *testing.T) {
	w := newWantedSets()
	k1, k2 := translate.NodeKey("node1"), translate.NodeKey("node2")
	ids := func(id string) map[string]string { return map[string]string{translate.KeyID: id, "other": "x"} }
	desired := &translate.Desired{Rows: map[translate.Key]*translate.Rows{
		k1: {AddressSets: []translate.AddressSet{{Name: "a1", Addresses: []string{"10.0.0.1", "10.0.0.2"}, ExternalIDs: ids("s1")}}},
		k2: {AddressSets: []translate.AddressSet{{Name: "a2", ExternalIDs: ids("s2")}}},
	}}
	w.record([]translate.Key{k1, k2}, desired)
	row := func(name, id string, addrs ...string) *nbdb.AddressSet {
		return &nbdb.AddressSet{Name: name, Addresses: addrs, ExternalIDs: ids(id)}
	}
	for _, tc := range []struct {
		what string
		row  *nbdb.AddressSet
		want bool
	}{
		{"as wanted", row("a1", "s1", "10.0.0.1", "10.0.0.2"), true},
		{"in another order", row("a1", "s1", "10.0.0.2", "10.0.0.1"), true},
		{"empty as wanted", row("a2", "s2"), true},
		{"an address missing", row("a1", "s1", "10.0.0.1"), false},
		{"an address more", row("a1", "s1", "10.0.0.1", "10.0.0.2", "10.0.0.3"), false},
		{"another address", row("a1", "s1", "10.0.0.1", "10.0.0.3"), false},
		{"renamed", row("b1", "s1", "10.0.0.1", "10.0.0.2"), false},
		{"unknown id", row("a1", "s9", "10.0.0.1", "10.0.0.2"), false},
		{"no id", &nbdb.AddressSet{Name: "a1", Addresses: []string{"10.0.0.1", "10.0.0.2"}}, false},
	} {
		if got := w.asWanted(tc.row); got != tc.want {
			t.Errorf("%s: asWanted = %v, want %v", tc.what, got, tc.want)
		}
	}

	// node1's set moves to the new wish; node2 (not synced) keeps its own;
	// a key synced without rows wants none.
	desired.Rows[k1].AddressSets[0].Addresses = []string{"10.0.0.3"}
	w.record([]translate.Key{k1}, desired)
	// (Its echo retires the old wish; TestWantedSetsLateEcho has the rest.)
	if !w.asWanted(row("a1", "s1", "10.0.0.3")) || w.asWanted(row("a1", "s1", "10.0.0.1", "10.0.0.2")) {
		t.Errorf("a new wish did not replace the old one")
	}
	if !w.isWanted(row("a2", "s2")) {
		t.Errorf("a key not synced lost its wish")
	}
	w.record([]translate.Key{k2}, &translate.Desired{Rows: map[translate.Key]*translate.Rows{}})
	if w.isWanted(row("a2", "s2")) || w.asWanted(row("a2", "s2")) {
		t.Errorf("a set no longer wanted is still wanted")
	}
}

// TestWantedSetsLateEcho: the echo of a write can be handled after the next
// sync of its key recorded a newer wish (libovsdb hands events over from a
// goroutine of its own). It is still the worker's own write; once NB has
// passed a wish — a later wish's echo arrived — that wish is drift again.
func TestWantedSetsLateEcho(t *testing.T) {
	w := newWantedSets()
	k := translate.NodeKey("node1")
	ids := map[string]string{translate.KeyID: "s1"}
	wish := func(addrs ...string) {
		w.record([]translate.Key{k}, &translate.Desired{Rows: map[translate.Key]*translate.Rows{
			k: {AddressSets: []translate.AddressSet{{Name: "a1", Addresses: addrs, ExternalIDs: ids}}},
		}})
	}
	row := func(addrs ...string) *nbdb.AddressSet {
		return &nbdb.AddressSet{Name: "a1", Addresses: addrs, ExternalIDs: ids}
	}
	wish("10.0.0.1")
	wish("10.0.0.1", "10.0.0.2")
	wish("10.0.0.1", "10.0.0.2", "10.0.0.3")
	if !w.asWanted(row("10.0.0.1")) || !w.asWanted(row("10.0.0.1", "10.0.0.2")) {
		t.Fatalf("late echoes of earlier wishes counted as drift")
	}
	// NB passed the first two wishes: they are drift from now on.
	if w.asWanted(row("10.0.0.1")) {
		t.Errorf("a wish NB has passed is still wanted")
	}
	if !w.asWanted(row("10.0.0.1", "10.0.0.2", "10.0.0.3")) || w.asWanted(row("10.0.0.1", "10.0.0.2")) {
		t.Errorf("the newest wish's echo did not retire the older ones")
	}
	// A wish recorded again unchanged adds nothing to retire.
	wish("10.0.0.1", "10.0.0.2", "10.0.0.3")
	if w.asWanted(row("10.0.0.9")) {
		t.Errorf("drift counted as wanted")
	}
	// Only the last few wishes wait for their echo.
	for i := range maxOlderWishes + 2 {
		wish(fmt.Sprintf("10.0.1.%d", i))
	}
	if w.asWanted(row("10.0.1.0")) {
		t.Errorf("more than %d older wishes kept", maxOlderWishes)
	}
	if !w.asWanted(row("10.0.1.2")) {
		t.Errorf("a recent older wish was forgotten")
	}
}
