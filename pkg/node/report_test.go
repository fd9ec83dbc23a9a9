package node

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestLayoutReport: entries stay in the part that has them, new ones fill
// the first part with room and then new parts, emptied later parts go,
// the first part always stays; no part exceeds the limit with new entries.
func TestLayoutReport(t *testing.T) {
	entry := translate.ServiceReport{IngressIPs: []string{"172.18.0.100"}, Endpoints: "0123456789abcdef"}
	report := func(keys ...string) translate.Report {
		r := translate.Report{}
		for _, k := range keys {
			r[k] = entry
		}
		return r
	}
	one := len(report("ns/a").Encode()) - 1 // an entry's share of an encoding
	limit := 2 + 3*one                      // three entries per part

	parts, _ := layoutReport(nil, report("ns/a", "ns/b", "ns/c", "ns/d", "ns/e"), limit, translate.ReportParts)
	if got := partKeys(parts); got != "0:[ns/a ns/b ns/c] 1:[ns/d ns/e]" {
		t.Errorf("first layout %s", got)
	}
	for p, r := range parts {
		if n := len(r.Encode()); n > limit {
			t.Errorf("part %d encodes to %d bytes, limit %d", p, n, limit)
		}
	}
	// b goes, f comes: f takes b's room in part 0; d and e stay in 1.
	parts, _ = layoutReport(parts, report("ns/a", "ns/c", "ns/d", "ns/e", "ns/f"), limit, translate.ReportParts)
	if got := partKeys(parts); got != "0:[ns/a ns/c ns/f] 1:[ns/d ns/e]" {
		t.Errorf("after a change %s", got)
	}
	// Entries of part 0 go: part 1's stay where they are, part 0 is kept.
	parts, _ = layoutReport(parts, report("ns/d", "ns/e"), limit, translate.ReportParts)
	if got := partKeys(parts); got != "0:[] 1:[ns/d ns/e]" {
		t.Errorf("after part 0 emptied %s", got)
	}
	// Everything goes: only the empty first part is left.
	parts, _ = layoutReport(parts, translate.Report{}, limit, translate.ReportParts)
	if got := partKeys(parts); got != "0:[]" {
		t.Errorf("nothing reported %s", got)
	}
	// 10,000 services at the real limit: every entry placed once, each part
	// within its ConfigMap.
	big := translate.Report{}
	for i := range 10000 {
		big[fmt.Sprintf("a-namespace-of-twenty/service-%05d", i)] = translate.ServiceReport{IngressIPs: []string{"172.18.0.100", "fc00:f853:ccd:e793::100"}, Network: "100", Endpoints: "0123456789abcdef"}
	}
	parts, left := layoutReport(nil, big, translate.ReportShardBytes, translate.ReportParts)
	seen := 0
	for p, r := range parts {
		seen += len(r)
		if n := len(r.Encode()); n > translate.ReportShardBytes {
			t.Errorf("part %d: %d bytes", p, n)
		}
	}
	if seen != len(big) || len(parts) < 2 || len(left) != 0 {
		t.Errorf("10,000 services in %d parts, %d entries placed", len(parts), seen)
	}
	t.Logf("10,000 services with 35-character names and both families: %d parts of at most %d bytes", len(parts), translate.ReportShardBytes)

	// Never more parts than the admission policy allows: what fits none is
	// left out (not reported, so not rerouted), and entries stay put.
	parts, left = layoutReport(nil, report("ns/a", "ns/b", "ns/c", "ns/d", "ns/e", "ns/f", "ns/g", "ns/h"), limit, 2)
	if got := partKeys(parts); got != "0:[ns/a ns/b ns/c] 1:[ns/d ns/e ns/f]" || !slices.Equal(left, []string{"ns/g", "ns/h"}) {
		t.Errorf("two parts at most: %s, left %v", got, left)
	}
	parts, left = layoutReport(parts, report("ns/b", "ns/d", "ns/g", "ns/h"), limit, 2)
	if got := partKeys(parts); got != "0:[ns/b ns/g ns/h] 1:[ns/d]" || len(left) != 0 {
		t.Errorf("room made: %s, left %v", got, left)
	}
}

func partKeys(parts map[int]translate.Report) string {
	s := ""
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%d:%v", p, slices.Sorted(maps.Keys(parts[p])))
	}
	return s
}
