package hosts

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"strings"
	"testing"
)

// TestSelectHostsCapsServicesPerNode: with a cap of two per node, five
// services on two nodes give four hosts and one NoEligibleNode naming the
// cap; a node already past a cap lowered later keeps what it hosts (no
// service moves for it), and takes no new one.
func TestSelectHostsCapsServicesPerNode(t *testing.T) {
	w := newWorld(2)
	for i := range 5 {
		w.lb(fmt.Sprintf("ns/s%d", i), "")
	}
	in := w.selectIn()
	in.MaxPerNode = 2
	res := SelectHosts(in)
	if res.Allocations["node1"] != 2 || res.Allocations["node2"] != 2 {
		t.Errorf("allocations %v, want two on each node", res.Allocations)
	}
	if h := res.Selections["ns/s4"].Host; h != "" {
		t.Errorf("ns/s4 hosted on %s past the cap", h)
	}
	if ps := res.Problems.For("ns/s4"); len(ps) != 1 || ps[0].Reason != translate.ReasonNoEligibleNode || !strings.Contains(ps[0].Message, "every candidate already hosts 2 EgressServices, the cap") {
		t.Errorf("ns/s4's problems %v, want NoEligibleNode naming the cap", ps)
	}

	// Three already on node1, the cap lowered to one: they stay, the new
	// one goes to node2, and the next waits.
	w = newWorld(2)
	for i := range 3 {
		w.lb(fmt.Sprintf("ns/kept%d", i), "node1")
	}
	w.lb("ns/new1", "")
	w.lb("ns/new2", "")
	in = w.selectIn()
	in.MaxPerNode = 1
	res = SelectHosts(in)
	for i := range 3 {
		if s := res.Selections[fmt.Sprintf("ns/kept%d", i)]; s.Changed() {
			t.Errorf("ns/kept%d moved from node1 to %q when the cap was lowered", i, s.Host)
		}
	}
	if h1, h2 := res.Selections["ns/new1"].Host, res.Selections["ns/new2"].Host; h1 != "node2" || h2 != "" {
		t.Errorf("new services on %q and %q, want node2 and none", h1, h2)
	}
}
