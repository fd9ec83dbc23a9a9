package egressip

import (
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Reporter records each EgressIP's problems as Warning Events, only when an
// object's problems differ from those it last reported (a resync repeats
// none), and forgets deleted objects. The assignment controller and the
// translation controller's EgressIP rows each have one.
type Reporter struct {
	recorder record.EventRecorder
	// only, when set, are the reasons reported (a zone's own problems).
	only     map[translate.Reason]bool
	mu       sync.Mutex
	reported map[string]string // EgressIP → the problems last reported
}

// NewReporter returns a Reporter of the problems of the reasons in only
// (nil: every reason).
func NewReporter(r record.EventRecorder, only map[translate.Reason]bool) *Reporter {
	return &Reporter{recorder: r, only: only, reported: map[string]string{}}
}

// Report returns the number of Events recorded. eips are every EgressIP
// when scope is nil; else those of the names in scope that exist.
func (r *Reporter) Report(eips []*egressipv1.EgressIP, problems translate.Problems, scope []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool, len(eips))
	n := 0
	for _, e := range eips {
		seen[e.Name] = true
		mine := problems.For(e.Name)
		if r.only != nil {
			mine = slices.DeleteFunc(slices.Clone(mine), func(p translate.Problem) bool { return !r.only[p.Reason] })
		}
		lines := make([]string, 0, len(mine))
		for _, p := range mine {
			lines = append(lines, p.String())
		}
		digest := strings.Join(lines, "\n")
		if r.reported[e.Name] == digest {
			continue
		}
		r.reported[e.Name] = digest
		for _, p := range mine {
			r.recorder.Event(e, corev1.EventTypeWarning, string(p.Reason), p.Message)
			n++
		}
	}
	forget := maps.Keys(r.reported)
	if scope != nil {
		forget = slices.Values(scope)
	}
	for name := range forget {
		if !seen[name] {
			delete(r.reported, name)
		}
	}
	return n
}
