package main

import (
	"strings"
	"testing"
)

// TestReport: a called vulnerability of a required module fails the check
// and is named with its fixed version; one only imported, and the standard
// library's, do not fail it (the latter are printed as warnings).
func TestReport(t *testing.T) {
	const stream = `{"config":{"protocol_version":"v1.0.0"}}
{"osv":{"id":"GO-2026-0001"}}
{"finding":{"osv":"GO-2026-0001","fixed_version":"v0.60.0","trace":[{"module":"golang.org/x/net","version":"v0.57.0","package":"golang.org/x/net/http2","function":"ReadFrame"},{"module":"github.com/ovn-egress/ovn-egress","package":"github.com/ovn-egress/ovn-egress/pkg/ovn","function":"Connect"}]}}
{"finding":{"osv":"GO-2026-0002","fixed_version":"v1.2.0","trace":[{"module":"example.com/only-imported","version":"v1.0.0","package":"example.com/only-imported/p"}]}}
{"finding":{"osv":"GO-2026-0003","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Get"}]}}
`
	for _, c := range []struct {
		name, in string
		failed   bool
		want     []string
		not      []string
	}{
		{"a called module vulnerability", stream, true,
			[]string{"vulnerable (go.mod): GO-2026-0001 golang.org/x/net@v0.57.0 (fixed in v0.60.0), called: golang.org/x/net/http2.ReadFrame",
				"warning (the toolchain): GO-2026-0003 stdlib@v1.26.8 (fixed in v1.26.9)"},
			[]string{"GO-2026-0002"}},
		{"the standard library's only", strings.Join(strings.Split(stream, "\n")[3:], "\n"), false,
			[]string{"vulncheck: ok (1 standard-library warnings)"}, []string{"vulnerable"}},
	} {
		var out strings.Builder
		failed, err := report(strings.NewReader(c.in), &out)
		if err != nil || failed != c.failed {
			t.Errorf("%s: failed %v, %v; want %v", c.name, failed, err, c.failed)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", c.name, w, out.String())
			}
		}
		for _, n := range c.not {
			if strings.Contains(out.String(), n) {
				t.Errorf("%s: output has %q:\n%s", c.name, n, out.String())
			}
		}
	}
	if _, err := report(strings.NewReader("{not json"), &strings.Builder{}); err == nil {
		t.Errorf("a broken stream was read without an error")
	}
}
