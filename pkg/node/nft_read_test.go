package node

import (
	"context"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// TestParseTable reads nft 1.0.6's JSON listing of a table like the
// agent's: elements with and without a comment, a set and a counter the
// reader skips, rules in order, and an empty chain that exists.
func TestParseTable(t *testing.T) {
	out := `{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
 {"table": {"family": "inet", "name": "ovn-egress", "handle": 1}},
 {"counter": {"family": "inet", "name": "leak-guard-invalid", "table": "ovn-egress", "handle": 3, "packets": 0, "bytes": 0}},
 {"map": {"family": "inet", "name": "snat-v4", "table": "ovn-egress", "type": "ipv4_addr", "handle": 4, "map": "ipv4_addr",
   "elem": [[{"elem": {"val": "10.0.0.1", "comment": "ns/a"}}, "172.18.0.100"], ["10.0.0.2", "172.18.0.101"]]}},
 {"map": {"family": "inet", "name": "snat-v6", "table": "ovn-egress", "type": "ipv6_addr", "handle": 5, "map": "ipv6_addr",
   "elem": [[{"elem": {"val": "fd00::1", "comment": "ns/a"}}, "fc00::100"]]}},
 {"set": {"family": "inet", "name": "withdrawn-v4", "table": "ovn-egress", "type": "ipv4_addr", "handle": 6, "flags": ["timeout"],
   "elem": [{"elem": {"val": "10.0.0.9", "timeout": 600, "expires": 599}}]}},
 {"chain": {"family": "inet", "table": "ovn-egress", "name": "snat", "handle": 1, "type": "nat", "hook": "postrouting", "prio": 100, "policy": "accept"}},
 {"chain": {"family": "inet", "table": "ovn-egress", "name": "forward-guard", "handle": 2}},
 {"rule": {"family": "inet", "table": "ovn-egress", "chain": "snat", "handle": 7, "comment": "first", "expr": []}},
 {"rule": {"family": "inet", "table": "ovn-egress", "chain": "snat", "handle": 8, "expr": []}},
 {"rule": {"family": "inet", "table": "ovn-egress", "chain": "snat", "handle": 9, "comment": "third", "expr": []}}]}`
	st, err := parseTable([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range st.elements {
		got = append(got, e.String())
	}
	slices.Sort(got)
	if want := []string{"v4 10.0.0.1 : 172.18.0.100  # ns/a", "v4 10.0.0.2 : 172.18.0.101  # ", "v6 fd00::1 : fc00::100  # ns/a"}; !slices.Equal(got, want) {
		t.Errorf("elements %v; want %v", got, want)
	}
	if want := []string{"first", "", "third"}; !slices.Equal(st.chains["snat"], want) {
		t.Errorf("snat chain %q; want %q", st.chains["snat"], want)
	}
	if c, ok := st.chains["forward-guard"]; !ok || len(c) != 0 {
		t.Errorf("the empty forward-guard chain reads as %q, %v; want present and empty", c, ok)
	}
	if _, ok := st.chains["leak-guard"]; ok {
		t.Error("a chain that is not there reads as present")
	}
	for _, bad := range []string{`{`, `{"nftables": [{"map": {"name": "snat-v4", "elem": [["10.0.0.1"]]}}]}`,
		`{"nftables": [{"map": {"name": "snat-v4", "elem": [[{"elem": {}}, "1.2.3.4"]]}}]}`} {
		if _, err := parseTable([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestTableReaderReadsAsKnftables: on a real table the agent built (SNAT
// elements in both families, its chains, a withdrawn endpoint), one nft
// run reads what knftables' five runs read; a namespace without the table
// reads as empty.
func TestTableReaderReadsAsKnftables(t *testing.T) {
	tns := testenv.NewNetNS(t, "oe-read")
	k := newKernelAgent(t, tns)
	empty := func() {
		t.Helper()
		if err := k.ns.Do(func() error {
			st, err := TableReader{}.read(context.Background())
			if err == nil && (len(st.elements) > 0 || len(st.chains) > 0) {
				t.Errorf("no table, read %+v", st)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	empty()
	want := nodeplan.NodeState{
		SNAT: []nodeplan.SNATElement{elem("10.128.0.3", "172.18.0.100", "namespace1/service1"),
			elem("10.128.0.4", "172.18.0.101", "namespace1/service2"), elem("fe00::3", "fc00::100", "namespace1/service1")},
		NoSNAT: noSNATSubnets, NodeIPs: []netip.Addr{netip.MustParseAddr("172.19.0.12")},
	}
	k.apply(t, want, ApplyOptions{})
	want.SNAT = want.SNAT[1:] // 10.128.0.3 withdrawn: it goes to the withdrawn set
	k.apply(t, want, ApplyOptions{})
	if err := k.ns.Do(func() error {
		one, err := TableReader{}.read(context.Background())
		if err != nil {
			return err
		}
		five, err := listNFT(context.Background(), k.a.nft)
		if err != nil {
			return err
		}
		if !maps.Equal(one.elements, five.elements) || len(one.elements) != 2 {
			t.Errorf("elements: one run %v, knftables %v", one.elements, five.elements)
		}
		for c, rules := range five.chains {
			if !slices.Equal(one.chains[c], rules) {
				t.Errorf("chain %s: one run %q, knftables %q", c, one.chains[c], rules)
			}
		}
		if len(five.chains) < 2 {
			t.Errorf("knftables read only chains %v", slices.Collect(maps.Keys(five.chains)))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
