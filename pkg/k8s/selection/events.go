package selection

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
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
	case translate.ReasonNoEligibleNode, translate.ReasonInvalidNodeSelector, translate.ReasonNoIngressIP,
		translate.ReasonInvalidIngressIP, translate.ReasonIngressIPShared, hosts.ReasonNodeLabelCollision:
		return true
	}
	return false
}

// events records the Events of host selection on EgressServices: a Normal
// HostAssigned or HostChanged when a new status.host is written, and a
// Warning for a problem when its reason appears — not at every sync, and
// not again while the reason stays (a reason that goes away and comes back
// is reported again).
type events struct {
	recorder record.EventRecorder
	drop     bool

	// changed, when set, is told of a service whose problems changed.
	changed func(key string)

	mu      sync.Mutex
	current map[string]translate.Problems // "namespace/name" → its problems at its last sync
}

func newEvents(r record.EventRecorder, drop bool, changed func(string)) *events {
	return &events{recorder: r, drop: drop, changed: changed, current: map[string]translate.Problems{}}
}

// hostProblems are the problems of the service's last decision.
func (e *events) hostProblems(k string) translate.Problems {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.current[k])
}

func describeHost(h string) string {
	if h == egressv1.HostAll {
		return "ALL (sourceIPBy Network: each node handles its own endpoints)"
	}
	return h
}

// hostWritten reports a status.host just written.
func (e *events) hostWritten(es *egressv1.EgressService, sel hosts.Selection) {
	if e.recorder == nil || sel.Host == "" {
		return // no host: the problems say why
	}
	if sel.Current == "" {
		e.recorder.Eventf(es, corev1.EventTypeNormal, string(hosts.ReasonHostAssigned), "host is %s", describeHost(sel.Host))
		return
	}
	msg := fmt.Sprintf("host changed from %s to %s", sel.Current, describeHost(sel.Host))
	if sel.Why != "" {
		msg += ": " + sel.Why
	}
	e.recorder.Event(es, corev1.EventTypeNormal, string(hosts.ReasonHostChanged), msg)
}

// problems reports the problems of an EgressService whose reasons were not
// there at its previous sync.
func (e *events) problems(es *egressv1.EgressService, ps translate.Problems, host string) {
	k := translate.EgressServiceKey(es)
	e.mu.Lock()
	prev := e.current[k]
	same := slices.Equal(prev, ps)
	if len(ps) == 0 {
		delete(e.current, k)
	} else {
		e.current[k] = slices.Clone(ps)
	}
	e.mu.Unlock()
	if !same && e.changed != nil {
		e.changed(k)
	}
	if e.recorder == nil {
		return
	}
	for _, p := range ps {
		if hasReason(prev, p.Reason) {
			continue
		}
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
	delete(e.current, k)
	e.mu.Unlock()
}

// hasReason reports whether one of ps has reason r.
func hasReason(ps translate.Problems, r translate.Reason) bool {
	return slices.ContainsFunc(ps, func(p translate.Problem) bool { return p.Reason == r })
}
