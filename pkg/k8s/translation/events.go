package translation

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	egresslisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/listers/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// DefaultEventReasons are the translation problems worth a Warning Event;
// the others are the host-selection controller's to report (or transient,
// like an agent catching up on an endpoint change).
func DefaultEventReasons() map[translate.Reason]bool {
	return map[translate.Reason]bool{
		translate.ReasonFamilyWithoutIngressIP: true,
		translate.ReasonSharedEndpoint:         true,
		translate.ReasonNodeAnnotationMissing:  true,
		translate.ReasonGatewayNotFound:        true,
		translate.ReasonNATAddressesNotRouter:  true,
		translate.ReasonUnassignedTrafficDrop:  true,
		translate.ReasonUnknownHost:            true,
		translate.ReasonTransitAddressMissing:  true,
	}
}

// problemEvents records a Warning Event on an EgressService when the set of
// its translation problems changes, not on every sync.
type problemEvents struct {
	recorder eventRecorder
	reasons  map[translate.Reason]bool
	// last is each service's problems last recorded (only the worker
	// records).
	last map[string]string
}

type eventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
}

func newProblemEvents(r eventRecorder, reasons map[translate.Reason]bool) *problemEvents {
	if reasons == nil {
		reasons = DefaultEventReasons()
	}
	return &problemEvents{recorder: r, reasons: reasons, last: map[string]string{}}
}

// record records the Events of the EgressServices translated again: one
// per problem of a reason worth it, when the set of those problems changed.
// A service no longer there is forgotten.
func (p *problemEvents) record(lister egresslisters.EgressServiceLister, keys []string, problemsOf func(string) []translate.Problem) {
	if p.recorder == nil {
		return
	}
	for _, key := range keys {
		var mine []translate.Problem
		var fp []string
		for _, pr := range problemsOf(key) {
			if p.reasons[pr.Reason] {
				mine = append(mine, pr)
				fp = append(fp, string(pr.Reason)+":"+pr.Message)
			}
		}
		slices.Sort(fp)
		f := strings.Join(fp, "\n")
		ns, name, _ := strings.Cut(key, "/")
		obj, err := lister.EgressServices(ns).Get(name)
		if err != nil {
			delete(p.last, key)
			continue
		}
		if p.last[key] == f {
			continue
		}
		p.last[key] = f
		for _, pr := range mine {
			p.recorder.Event(obj, corev1.EventTypeWarning, string(pr.Reason), pr.Message)
		}
	}
}
