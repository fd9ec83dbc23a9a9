package hosts

import (
	"strings"
	"testing"
	"time"
)

// TestSelectHostsRefusesLabelCollision: team-a/web and team/a-web have one
// host label; only the one created first is hosted, whatever their names'
// order, and the other says why. With one created at the same second, the
// first by name keeps it; alone, each is hosted.
func TestSelectHostsRefusesLabelCollision(t *testing.T) {
	if NodeLabel("team-a", "web") != NodeLabel("team", "a-web") {
		t.Fatalf("the test's pair does not collide: %s, %s", NodeLabel("team-a", "web"), NodeLabel("team", "a-web"))
	}
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		createdA, createdB time.Time // team-a/web, team/a-web
		hostedKey, refused string
	}{
		{"the later name created first keeps it", t0.Add(time.Minute), t0, "team/a-web", "team-a/web"},
		{"the earlier name created first keeps it", t0, t0.Add(time.Minute), "team-a/web", "team/a-web"},
		{"created together: the first by name", t0, t0, "team-a/web", "team/a-web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(3)
			w.lb("team-a/web", "").CreationTimestamp.Time = tc.createdA
			w.lb("team/a-web", "").CreationTimestamp.Time = tc.createdB
			in := w.selectIn()
			label := NodeLabel("team", "a-web")
			in.LabelClaims = map[string][]LabelClaim{label: {{"team-a/web", tc.createdA}, {"team/a-web", tc.createdB}}}
			res := SelectHosts(in)
			if h := res.Selections[tc.hostedKey].Host; h == "" {
				t.Errorf("%s is not hosted: %v", tc.hostedKey, res.Problems)
			}
			if h := res.Selections[tc.refused].Host; h != "" {
				t.Errorf("%s is hosted on %s beside %s with one label", tc.refused, h, tc.hostedKey)
			}
			ps := res.Problems.For(tc.refused)
			if len(ps) != 1 || ps[0].Reason != ReasonNodeLabelCollision || !strings.Contains(ps[0].Message, tc.hostedKey+", which holds it") {
				t.Errorf("%s's problems %v; want NodeLabelCollision naming %s", tc.refused, ps, tc.hostedKey)
			}
			if ps := res.Problems.For(tc.hostedKey); len(ps) != 0 {
				t.Errorf("%s's problems %v; want none", tc.hostedKey, ps)
			}
		})
	}
}
