package selection

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// dropNotice ends the message of a problem that leaves a LoadBalancerIP
// EgressService with endpoints but without a host, under
// --unassigned-traffic=drop (the translation controller reports the
// number of dropped endpoints separately, as UnassignedTrafficDropped).
const dropNotice = "; with --unassigned-traffic=drop, traffic its endpoints send out of the cluster is dropped until it has a host"

// leavesEndpointsUnhosted reports the problems after which a Service with
// endpoints is left without a host (and so, with drop, fails closed).
func leavesEndpointsUnhosted(r translate.Reason) bool {
	switch r {
	case translate.ReasonNoEligibleNode, translate.ReasonInvalidNodeSelector, translate.ReasonNoIngressIP:
		return true
	}
	return false
}

// events records the Events of host selection on EgressServices: a Normal
// HostAssigned or HostChanged when a new status.host is written, and one
// Warning per problem when the set of an EgressService's problem reasons
// changes — not at every sync.
type events struct {
	recorder record.EventRecorder
	drop     bool

	mu   sync.Mutex
	last map[string]string // "namespace/name" → its problem reasons, joined
}

func newEvents(r record.EventRecorder, drop bool) *events {
	return &events{recorder: r, drop: drop, last: map[string]string{}}
}

func describeHost(h string) string {
	if h == egressv1.HostAll {
		return "ALL (sourceIPBy Network: each node handles its own endpoints)"
	}
	return h
}

// hostWritten reports a status.host just written.
func (e *events) hostWritten(es *egressv1.EgressService, sel translate.Selection) {
	if e.recorder == nil || sel.Host == "" {
		return // no host: the problems say why
	}
	if sel.Current == "" {
		e.recorder.Eventf(es, corev1.EventTypeNormal, string(translate.ReasonHostAssigned), "host is %s", describeHost(sel.Host))
		return
	}
	msg := fmt.Sprintf("host changed from %s to %s", sel.Current, describeHost(sel.Host))
	if sel.Why != "" {
		msg += ": " + sel.Why
	}
	e.recorder.Event(es, corev1.EventTypeNormal, string(translate.ReasonHostChanged), msg)
}

// problems reports an EgressService's problems if their reasons changed
// since the last time.
func (e *events) problems(es *egressv1.EgressService, ps translate.Problems, host string) {
	var reasons []string
	for _, p := range ps {
		reasons = append(reasons, string(p.Reason))
	}
	slices.Sort(reasons)
	fp := strings.Join(slices.Compact(reasons), ",")
	k := translate.EgressServiceKey(es)
	e.mu.Lock()
	same := e.last[k] == fp
	if fp == "" {
		delete(e.last, k)
	} else {
		e.last[k] = fp
	}
	e.mu.Unlock()
	if same || e.recorder == nil {
		return
	}
	for _, p := range ps {
		msg := p.Message
		if e.drop && host == "" && leavesEndpointsUnhosted(p.Reason) {
			msg += dropNotice
		}
		e.recorder.Event(es, corev1.EventTypeWarning, string(p.Reason), msg)
	}
}

// forget drops what is remembered of a deleted EgressService.
func (e *events) forget(k string) {
	e.mu.Lock()
	delete(e.last, k)
	e.mu.Unlock()
}
