package nbsync

import (
	"slices"
	"strings"
	"sync"

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
	mu       sync.Mutex
	last     map[string]string
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

func (p *problemEvents) record(lister egresslisters.EgressServiceLister, in translate.Input, problems translate.Problems) {
	if p.recorder == nil {
		return
	}
	by := map[string][]translate.Problem{}
	for _, pr := range problems {
		if p.reasons[pr.Reason] {
			by[pr.Key] = append(by[pr.Key], pr)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, es := range in.EgressServices {
		key := translate.EgressServiceKey(es)
		var fp []string
		for _, pr := range by[key] {
			fp = append(fp, string(pr.Reason)+":"+pr.Message)
		}
		slices.Sort(fp)
		f := strings.Join(fp, "\n")
		if p.last[key] == f {
			continue
		}
		p.last[key] = f
		obj, err := lister.EgressServices(es.Namespace).Get(es.Name)
		if err != nil {
			continue
		}
		for _, pr := range by[key] {
			p.recorder.Event(obj, corev1.EventTypeWarning, string(pr.Reason), pr.Message)
		}
	}
}

func (p *problemEvents) forget(key string) {
	p.mu.Lock()
	delete(p.last, key)
	p.mu.Unlock()
}
