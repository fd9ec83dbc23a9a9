package coexist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	libcache "github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
	egressv1informers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions/egressservice/v1"
	egresslisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/listers/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Config says what the Detector looks at.
type Config struct {
	// ReroutePriority is ovn-egress's reroute priority (ovn-kubernetes'
	// EgressService uses 101 too).
	ReroutePriority int
	// Central: the NB must not be an interconnect zone's (a central master).
	Central bool
}

// Detector tracks the Conflict: ovn-kubernetes' rows in an NB (when it has
// one) and the EgressServices whose status ovn-kubernetes wrote (fed by
// ObserveEgressService, from the informer's transform, before managedFields
// are dropped). It logs every change once, records a Warning Event on the
// EgressServices a new conflict names, and calls the subscribers.
type Detector struct {
	cfg      Config
	nb       client.Client // nil: no NB (an interconnect master)
	log      *logrus.Entry
	recorder record.EventRecorder

	mu      sync.Mutex
	writers map[string]bool // EgressServices whose status.host ovnkube wrote
	lister  egresslisters.EgressServiceLister
	cur     Conflict
	subs    []func(Conflict)
	kick    chan struct{}
	// dirty: something changed since the last evaluation; Blocked
	// evaluates first, so no controller acts on a stale verdict.
	dirty  atomic.Bool
	evalMu sync.Mutex
}

// New returns a Detector; Run evaluates it.
func New(cfg Config, nb client.Client, log *logrus.Entry, recorder record.EventRecorder) *Detector {
	d := &Detector{cfg: cfg, nb: nb, log: log, recorder: recorder, writers: map[string]bool{}, kick: make(chan struct{}, 1)}
	d.dirty.Store(true)
	if nb != nil {
		nb.Cache().AddEventHandler(d.nbHandler())
	}
	return d
}

// Watch hands the Detector the EgressService lister (for its Events) and
// the deletions (a deleted object's status writer is gone).
func (d *Detector) Watch(inf egressv1informers.EgressServiceInformer) error {
	d.SetLister(inf.Lister())
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) {
		if es, ok := controller.As[*egressv1.EgressService](o); ok {
			d.Forget(es.Namespace + "/" + es.Name)
		}
	}})
	if err != nil {
		return fmt.Errorf("egressservice handler: %w", err)
	}
	return nil
}

// SetLister gives the Detector the EgressServices to record Events on.
func (d *Detector) SetLister(l egresslisters.EgressServiceLister) {
	d.mu.Lock()
	d.lister = l
	d.mu.Unlock()
}

// OnChange subscribes f to every change of the conflict (called from Run's
// goroutine).
func (d *Detector) OnChange(f func(Conflict)) {
	d.mu.Lock()
	d.subs = append(d.subs, f)
	d.mu.Unlock()
}

// Conflict is the state last evaluated.
func (d *Detector) Conflict() Conflict {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur
}

// Blocked reports whether controllers must write nothing, and why (the
// controllers' own small interface). It evaluates first when anything
// changed since the last evaluation.
func (d *Detector) Blocked() (string, bool) {
	// Under evalMu: an evaluation in progress (Run's) has cleared dirty
	// but not yet published its verdict; waiting for it is what makes the
	// verdict never older than what the caller has read.
	d.evalMu.Lock()
	if d.dirty.Load() {
		d.evaluateLocked(context.Background())
	}
	d.evalMu.Unlock()
	c := d.Conflict()
	return c.String(), c.Active()
}

// ObserveEgressService notes whether an ovn-kubernetes manager wrote the
// object's status last: it is called with every EgressService the informer
// receives, before managedFields are dropped (informer.WithStatusWriters).
func (d *Detector) ObserveEgressService(es *egressv1.EgressService) {
	if len(es.ManagedFields) == 0 {
		// No managedFields: already stripped (client-go may hand an object
		// to the transform twice) — this says nothing about the writer.
		return
	}
	foreign := WrittenByOVNKube(es.ManagedFields)
	key := es.Namespace + "/" + es.Name
	d.mu.Lock()
	changed := d.writers[key] != foreign
	if foreign {
		d.writers[key] = true
	} else {
		delete(d.writers, key)
	}
	d.mu.Unlock()
	if changed {
		d.Kick()
	}
}

// Forget drops a deleted EgressService.
func (d *Detector) Forget(key string) {
	d.mu.Lock()
	_, had := d.writers[key]
	delete(d.writers, key)
	d.mu.Unlock()
	if had {
		d.Kick()
	}
}

// WrittenByOVNKube reports whether the status subresource's fields are
// managed by ovn-kubernetes: an Update through /status moves the fields it
// sets to its manager, so its entry exists exactly while it wrote last.
func WrittenByOVNKube(mf []metav1.ManagedFieldsEntry) bool {
	for _, e := range mf {
		if e.Subresource == "status" && strings.HasPrefix(e.Manager, Manager) {
			return true
		}
	}
	return false
}

// Kick asks Run to evaluate again.
func (d *Detector) Kick() {
	d.dirty.Store(true)
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run evaluates once now and again whenever kicked, until ctx ends.
func (d *Detector) Run(ctx context.Context) {
	d.evaluate(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
			d.evaluate(ctx)
		}
	}
}

// Evaluate computes the conflict now (Run does it on every kick; tests and
// callers that need the state before Run use it).
func (d *Detector) Evaluate(ctx context.Context) Conflict {
	d.evaluate(ctx)
	return d.Conflict()
}

func (d *Detector) evaluate(ctx context.Context) {
	d.evalMu.Lock()
	defer d.evalMu.Unlock()
	d.evaluateLocked(ctx)
}

// evaluateLocked computes the conflict; evalMu is held.
func (d *Detector) evaluateLocked(ctx context.Context) {
	d.dirty.Store(false)
	var c Conflict
	names := map[string]bool{}
	if d.nb != nil {
		pols, served, svcs, err := ovn.ForeignEgressService(ctx, d.nb, d.cfg.ReroutePriority)
		if err != nil {
			d.log.WithError(err).Warn("cannot read ovn-kubernetes' egress-service rows")
		}
		c.EgressSVCPolicies, c.ServedPods = pols, served
		for _, s := range svcs {
			names[s] = true
		}
		if d.cfg.Central {
			if c.InterconnectNB, err = ovn.HasRemotePorts(ctx, d.nb); err != nil {
				d.log.WithError(err).Warn("cannot read the NB's switch ports")
			}
		}
	}
	d.mu.Lock()
	for k := range d.writers {
		c.StatusWriters = append(c.StatusWriters, k)
		names[k] = true
	}
	slices.Sort(c.StatusWriters)
	for k := range names {
		c.Services = append(c.Services, k)
	}
	slices.Sort(c.Services)
	prev := d.cur
	d.cur = c
	subs := slices.Clone(d.subs)
	lister := d.lister
	d.mu.Unlock()
	if same(prev, c) {
		return
	}
	switch {
	case c.Active():
		d.log.Warn(c.String())
		d.record(lister, prev, c)
	case prev.Active():
		d.log.Info("the conflict with ovn-kubernetes is gone; ovn-egress resumes writing")
	}
	for _, f := range subs {
		f(c)
	}
}

// record posts a Warning Event on every EgressService the conflict names
// that the previous state did not.
func (d *Detector) record(lister egresslisters.EgressServiceLister, prev, c Conflict) {
	if d.recorder == nil || lister == nil {
		return
	}
	for _, key := range c.Services {
		if slices.Contains(prev.Services, key) && prev.Active() {
			continue
		}
		ns, name, _ := strings.Cut(key, "/")
		es, err := lister.EgressServices(ns).Get(name)
		if err != nil {
			continue
		}
		d.recorder.Event(es, corev1.EventTypeWarning, Reason, c.String())
	}
}

func same(a, b Conflict) bool {
	return a.EgressSVCPolicies == b.EgressSVCPolicies && a.ServedPods == b.ServedPods && a.InterconnectNB == b.InterconnectNB &&
		slices.Equal(a.StatusWriters, b.StatusWriters) && slices.Equal(a.Services, b.Services)
}

// nbHandler kicks on changes of the rows a conflict is made of.
func (d *Detector) nbHandler() libcache.EventHandler {
	on := func(m model.Model) {
		switch r := m.(type) {
		case *nbdb.LogicalRouterPolicy:
			if _, ok := r.ExternalIDs[ovn.EgressSVCKey]; ok {
				d.Kick()
			}
		case *nbdb.AddressSet:
			if r.ExternalIDs[translate.KeyName] == ovn.EgressSVCServedPods {
				d.Kick()
			}
		case *nbdb.LogicalSwitchPort:
			if r.Type == "remote" && d.cfg.Central {
				d.Kick()
			}
		}
	}
	return &libcache.EventHandlerFuncs{
		AddFunc:    func(_ string, m model.Model) { on(m) },
		UpdateFunc: func(_ string, old, cur model.Model) { on(old); on(cur) },
		DeleteFunc: func(_ string, m model.Model) { on(m) },
	}
}
