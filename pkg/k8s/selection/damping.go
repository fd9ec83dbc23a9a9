package selection

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// selectorMoves remembers, per EgressService, the last host move its
// selector caused: when, and the selector its host was last decided under
// (the one that caused the move, or a later one the host still matched).
// A host mismatched by a selector change within the window is damped
// (SelectInput.Damped); a mismatch under that selector (a node's labels
// changed) never is.
type selectorMoves struct {
	window time.Duration
	now    func() time.Time
	mu     sync.Mutex
	last   map[string]selectorMove
}

type selectorMove struct {
	at       time.Time
	selector string
}

func newSelectorMoves(window time.Duration) *selectorMoves {
	return &selectorMoves{window: window, now: time.Now, last: map[string]selectorMove{}}
}

// selectorOf is the EgressService's node selector as a canonical string.
func selectorOf(es *egressv1.EgressService) string {
	return metav1.FormatLabelSelector(&es.Spec.NodeSelector)
}

// moved records a host move of es that its selector caused.
func (m *selectorMoves) moved(es *egressv1.EgressService) {
	if m.window <= 0 {
		return
	}
	m.mu.Lock()
	m.last[translate.EgressServiceKey(es)] = selectorMove{at: m.now(), selector: selectorOf(es)}
	m.mu.Unlock()
}

// damped returns the EgressServices of ess whose selector changed since it
// last moved them, less than the window ago, each with the time left until
// it may move. Records past the window are dropped.
func (m *selectorMoves) damped(ess []*egressv1.EgressService) map[string]time.Duration {
	if m.window <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := map[string]time.Duration{}
	for _, es := range ess {
		k := translate.EgressServiceKey(es)
		rec, ok := m.last[k]
		if !ok {
			continue
		}
		left := m.window - now.Sub(rec.at)
		if left <= 0 {
			delete(m.last, k)
			continue
		}
		if rec.selector != selectorOf(es) {
			out[k] = left
		}
	}
	return out
}

// kept notes that es's host was kept under its current selector: a later
// mismatch under that selector is a node's labels changing, never damped.
func (m *selectorMoves) kept(es *egressv1.EgressService) {
	if m.window <= 0 {
		return
	}
	k := translate.EgressServiceKey(es)
	m.mu.Lock()
	if rec, ok := m.last[k]; ok {
		rec.selector = selectorOf(es)
		m.last[k] = rec
	}
	m.mu.Unlock()
}

// forget drops the record of a deleted EgressService.
func (m *selectorMoves) forget(k string) {
	m.mu.Lock()
	delete(m.last, k)
	m.mu.Unlock()
}
