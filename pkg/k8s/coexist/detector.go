package coexist

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	libcache "github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	egressv1informers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions/egressservice/v1"
	egresslisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/listers/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// DefaultClearAfter is how long a conflict must stay gone before
// ovn-egress resumes: ovn-kubernetes deletes and re-creates its rows while
// it moves a host (seen with the real binaries: zones resumed, wrote, and
// stood back again, ending half-moved).
const DefaultClearAfter = 5 * time.Second

// Config says what the Detector looks at.
type Config struct {
	// ReroutePriority is ovn-egress's reroute priority (ovn-kubernetes'
	// EgressService uses 101 too).
	ReroutePriority int
	// Central: the NB must not be an interconnect zone's (a central master).
	Central bool
	// EgressIP: look for ovn-kubernetes' serving EgressIP rows too.
	EgressIP bool
	// HoldWriters holds an EgressService whose status.host a foreign field
	// manager wrote (for host selection, which writes status.host).
	HoldWriters bool
	// Hold is how long such a write holds its service (DefaultHold when 0).
	Hold time.Duration
	// ClearAfter is how long a conflict must stay gone before it is
	// reported gone (DefaultClearAfter when 0).
	ClearAfter time.Duration
	// Instance names this install ("namespace/release"): the NB is claimed
	// for it (ovn.ClaimInstance) before anything is written, and another
	// install's claim stands everything back. Empty: no claim (offline
	// tools, and callers that run no writer).
	Instance string
}

func (c Config) hold() time.Duration {
	if c.Hold > 0 {
		return c.Hold
	}
	return DefaultHold
}

func (c Config) clearAfter() time.Duration {
	if c.ClearAfter > 0 {
		return c.ClearAfter
	}
	return DefaultClearAfter
}

// Detector tracks the Conflict: ovn-kubernetes' rows in an NB (when it has
// one), the zones' verdicts in the node agents' reports (when given them),
// and the EgressServices whose status.host a foreign manager wrote (fed by
// ObserveEgressService, from the informer's transform, before managedFields
// are dropped). It logs every change once, records a Warning Event on the
// EgressServices a new conflict or hold names, and calls the subscribers.
type Detector struct {
	cfg      Config
	nb       client.Client // nil: no NB (an interconnect master)
	log      *logrus.Entry
	recorder record.EventRecorder
	now      func() time.Time

	mu      sync.Mutex
	holds   map[string]hold // EgressServices whose status.host a foreign manager wrote
	lister  egresslisters.EgressServiceLister
	reports corelisters.ConfigMapLister
	// reportsSynced reports whether the report informer has synced.
	reportsSynced cache.InformerSynced
	cur           Conflict
	retryClaim    bool // the last claim failed: evaluate again soon
	// esSeen, eipSeen: when each part of the conflict was last found; a
	// part is reported gone only ClearAfter later.
	esSeen, eipSeen time.Time
	timer           *time.Timer
	subs            []func(Conflict)
	kick            chan struct{}
	// dirty: something changed since the last evaluation; Blocked
	// evaluates first, so no controller acts on a stale verdict.
	dirty  atomic.Bool
	evalMu sync.Mutex
}

// New returns a Detector; Run evaluates it.
func New(cfg Config, nb client.Client, log *logrus.Entry, recorder record.EventRecorder) *Detector {
	d := &Detector{cfg: cfg, nb: nb, log: log, recorder: recorder, now: time.Now, holds: map[string]hold{}, kick: make(chan struct{}, 1)}
	d.dirty.Store(true)
	if nb != nil {
		nb.Cache().AddEventHandler(d.nbHandler())
	}
	return d
}

// Watch hands the Detector the EgressService lister (for its Events) and
// the deletions (a deleted object's hold is gone).
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

// WatchReports makes the Detector read the zones' verdicts from the node
// agents' report ConfigMaps (an interconnect master, which has no NB).
func (d *Detector) WatchReports(inf coreinformers.ConfigMapInformer) error {
	d.mu.Lock()
	d.reports, d.reportsSynced = inf.Lister(), inf.Informer().HasSynced
	d.mu.Unlock()
	verdict := func(o any) string {
		if cm, ok := controller.As[*corev1.ConfigMap](o); ok {
			return cm.Data[ReportVerdictKey]
		}
		return ""
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if verdict(o) != "" {
				d.Kick()
			}
		},
		UpdateFunc: func(o, n any) {
			if verdict(o) != verdict(n) {
				d.Kick()
			}
		},
		DeleteFunc: func(o any) {
			if verdict(o) != "" {
				d.Kick()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("report handler: %w", err)
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

// Blocked reports whether the EgressService controllers must write
// nothing, and why (the controllers' own small interface). It evaluates
// first when anything changed since the last evaluation.
func (d *Detector) Blocked() (string, bool) {
	c := d.fresh()
	return c.String(), c.Active()
}

// EgressIPBlocked is Blocked for the EgressIP controllers.
func (d *Detector) EgressIPBlocked() (string, bool) {
	c := d.fresh()
	return c.EgressIPString(), c.EgressIPActive()
}

// fresh evaluates when anything changed, then returns the verdict.
func (d *Detector) fresh() Conflict {
	// Under evalMu: an evaluation in progress (Run's) has cleared dirty
	// but not yet published its verdict; waiting for it is what makes the
	// verdict never older than what the caller has read.
	d.evalMu.Lock()
	if d.dirty.Load() {
		d.evaluateLocked(context.Background())
	}
	d.evalMu.Unlock()
	return d.Conflict()
}

// Held reports whether EgressService key ("namespace/name") is held: a
// foreign field manager wrote its status.host less than Config.Hold ago.
// Host selection then leaves its status.host and node label as written.
func (d *Detector) Held(key string) bool {
	d.mu.Lock()
	h, ok := d.holds[key]
	d.mu.Unlock()
	return ok && d.now().Before(h.since.Add(d.cfg.hold()))
}

// HeldKeys lists the EgressServices held now ("namespace/name", sorted).
func (d *Detector) HeldKeys() []string {
	var out []string
	now := d.now()
	d.mu.Lock()
	for k, h := range d.holds {
		if now.Before(h.since.Add(d.cfg.hold())) {
			out = append(out, k)
		}
	}
	d.mu.Unlock()
	slices.Sort(out)
	return out
}

// ObserveEgressService notes who owns the object's status.host: it is
// called with every EgressService the informer receives, before
// managedFields are dropped (informer.Egress's observers). A new foreign
// write (another manager, or the same one writing again) starts a hold;
// ovn-egress's own write, or an operator's, ends it.
func (d *Detector) ObserveEgressService(es *egressv1.EgressService) {
	if !d.cfg.HoldWriters || len(es.ManagedFields) == 0 {
		// No managedFields: already stripped (client-go may hand an object
		// to the transform twice) — this says nothing about the writer.
		return
	}
	w, foreign := ForeignStatusWriter(es.ManagedFields)
	key := es.Namespace + "/" + es.Name
	d.mu.Lock()
	h, had := d.holds[key]
	changed := false
	switch {
	case foreign && (!had || h.w != w):
		d.holds[key] = hold{w: w, since: d.now()}
		changed = true
	case !foreign && had:
		delete(d.holds, key)
		changed = true
	}
	d.mu.Unlock()
	if changed {
		d.Kick()
	}
}

// Forget drops a deleted EgressService.
func (d *Detector) Forget(key string) {
	d.mu.Lock()
	_, had := d.holds[key]
	delete(d.holds, key)
	d.mu.Unlock()
	if had {
		d.Kick()
	}
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
			d.mu.Lock()
			if d.timer != nil {
				d.timer.Stop()
			}
			d.mu.Unlock()
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

// found reads what is there now, before debouncing.
func (d *Detector) found(ctx context.Context, reports corelisters.ConfigMapLister) Conflict {
	var c Conflict
	if d.nb != nil {
		pols, served, svcs, err := ovn.ForeignEgressService(ctx, d.nb, d.cfg.ReroutePriority)
		if err != nil {
			d.log.WithError(err).Warn("cannot read ovn-kubernetes' egress-service rows")
		}
		c.EgressSVCPolicies, c.ServedPods, c.Services = pols, served, svcs
		if d.cfg.Central {
			if c.InterconnectNB, err = ovn.HasRemotePorts(ctx, d.nb); err != nil {
				d.log.WithError(err).Warn("cannot read the NB's switch ports")
			}
		}
		if d.cfg.EgressIP {
			if c.EgressIPRows, err = ovn.OVNKubeEgressIPServing(ctx, d.nb); err != nil {
				d.log.WithError(err).Warn("cannot read ovn-kubernetes' EgressIP rows")
			}
		}
		if d.cfg.Instance != "" {
			c.ForeignInstance, c.Unclaimed = d.claim(ctx)
		}
	}
	if reports != nil {
		cms, err := reports.List(labels.Everything())
		if err != nil {
			d.log.WithError(err).Warn("cannot list the node agents' reports")
		}
		c.Zones, c.EgressIPZones = zoneVerdicts(cms)
	}
	return c
}

// claim claims the NB for this install and returns the other install that
// holds it ("" when this one does), or why the claim failed (the NB down,
// a lost race to create NB_Global). A failed claim is tried again soon:
// until then nothing is written, as under a foreign claim.
func (d *Detector) claim(ctx context.Context) (foreign, unclaimed string) {
	owner, err := ovn.ClaimInstance(ctx, d.nb, d.cfg.Instance)
	if err != nil {
		d.log.WithError(err).Warn("cannot claim the NB; writing nothing until it is claimed")
		d.mu.Lock()
		d.retryClaim = true
		d.mu.Unlock()
		return "", err.Error()
	}
	if owner == d.cfg.Instance {
		return "", ""
	}
	return owner, ""
}

// evaluateLocked computes the conflict; evalMu is held.
func (d *Detector) evaluateLocked(ctx context.Context) {
	d.dirty.Store(false)
	d.mu.Lock()
	reports, synced := d.reports, d.reportsSynced
	d.mu.Unlock()
	c := d.found(ctx, reports)
	now := d.now()
	waiting := synced != nil && !synced()

	d.mu.Lock()
	prev := d.cur
	var next time.Time // when to evaluate again by itself
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for k, h := range d.holds {
		if until := h.since.Add(d.cfg.hold()); now.Before(until) {
			c.Held = append(c.Held, k)
			later(until)
		}
	}
	slices.Sort(c.Held)
	// A part that was active stays so until it has been gone ClearAfter.
	switch {
	case c.Active():
		d.esSeen = now
	case prev.Active() && now.Sub(d.esSeen) < d.cfg.clearAfter():
		c.EgressSVCPolicies, c.ServedPods, c.InterconnectNB = prev.EgressSVCPolicies, prev.ServedPods, prev.InterconnectNB
		c.Zones, c.Services, c.ForeignInstance = prev.Zones, prev.Services, prev.ForeignInstance
		later(d.esSeen.Add(d.cfg.clearAfter()))
	}
	switch {
	case c.EgressIPRows > 0 || len(c.EgressIPZones) > 0:
		d.eipSeen = now
	case (prev.EgressIPRows > 0 || len(prev.EgressIPZones) > 0) && now.Sub(d.eipSeen) < d.cfg.clearAfter():
		c.EgressIPRows, c.EgressIPZones = prev.EgressIPRows, prev.EgressIPZones
		later(d.eipSeen.Add(d.cfg.clearAfter()))
	}
	if waiting {
		c.Waiting = true
		later(now.Add(100 * time.Millisecond))
	}
	if d.retryClaim {
		d.retryClaim = false
		later(now.Add(time.Second))
	}
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if !next.IsZero() {
		d.timer = time.AfterFunc(next.Sub(now)+time.Millisecond, d.Kick)
	}
	d.cur = c
	subs := slices.Clone(d.subs)
	lister := d.lister
	holds := maps.Clone(d.holds)
	d.mu.Unlock()
	if same(prev, c) {
		return
	}
	// Logged and recorded: what was found, not the start-up wait.
	was, is := prev, c
	was.Waiting, is.Waiting = false, false
	switch {
	case is.Active() && (!was.Active() || is.String() != was.String()):
		d.log.Warn(is.String())
		d.record(lister, was, is)
	case !is.Active() && was.Active():
		d.log.Info("the conflict with ovn-kubernetes is gone; ovn-egress resumes writing")
	}
	switch {
	case !d.cfg.EgressIP:
	case is.EgressIPActive() && (!was.EgressIPActive() || is.EgressIPString() != was.EgressIPString()):
		d.log.Warn(is.EgressIPString())
	case !is.EgressIPActive() && was.EgressIPActive():
		d.log.Info("the EgressIP conflict with ovn-kubernetes is gone; ovn-egress resumes its EgressIP work")
	}
	d.recordHolds(lister, prev, c, holds)
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
		if es := get(lister, key); es != nil {
			d.recorder.Event(es, corev1.EventTypeWarning, Reason, c.String())
		}
	}
}

// recordHolds logs each new hold and posts its Warning Event.
func (d *Detector) recordHolds(lister egresslisters.EgressServiceLister, prev, c Conflict, holds map[string]hold) {
	for _, key := range c.Held {
		if slices.Contains(prev.Held, key) {
			continue
		}
		h := holds[key]
		msg := fmt.Sprintf("status.host was written by field manager %q, not by ovn-egress: ovn-egress leaves this EgressService's "+
			"status.host and node label as written until %s, so that it fights no other controller over them "+
			"(`ovn-egress migrate --apply` ends this at once; a write by kubectl does too); if ovn-kubernetes' egress-service feature is on: %s",
			h.w.Manager, h.since.Add(d.cfg.hold()).UTC().Format(time.RFC3339), Remedy)
		d.log.WithField("egressservice", key).WithField("manager", h.w.Manager).Warn(msg)
		if d.recorder == nil || lister == nil {
			continue
		}
		if es := get(lister, key); es != nil {
			d.recorder.Event(es, corev1.EventTypeWarning, ReasonHeld, msg)
		}
	}
}

func get(lister egresslisters.EgressServiceLister, key string) *egressv1.EgressService {
	ns, name, _ := strings.Cut(key, "/")
	es, err := lister.EgressServices(ns).Get(name)
	if err != nil {
		return nil
	}
	return es
}

func same(a, b Conflict) bool {
	// Structural, so that no field is forgotten (one was: another install's
	// claim ended and nothing resumed); empty and nil lists alike.
	norm := func(c Conflict) Conflict {
		for _, l := range []*[]string{&c.Zones, &c.Services, &c.EgressIPZones, &c.Held} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// nbHandler kicks on changes of the rows a conflict is made of.
func (d *Detector) nbHandler() libcache.EventHandler {
	on := func(m model.Model) {
		if ids, ok := ovn.NATExternalIDs(m); ok { // either NAT model
			if d.cfg.EgressIP && ovn.IsOVNKubeEgressIP(ids) {
				d.Kick()
			}
			return
		}
		switch r := m.(type) {
		case *nbdb.LogicalRouterPolicy:
			if _, ok := r.ExternalIDs[ovn.EgressSVCKey]; ok || (d.cfg.EgressIP && ovn.IsOVNKubeEgressIP(r.ExternalIDs)) {
				d.Kick()
			}
		case *nbdb.AddressSet:
			if n := r.ExternalIDs[translate.KeyName]; n == ovn.EgressSVCServedPods || (d.cfg.EgressIP && n == ovn.EgressIPServedPods) {
				d.Kick()
			}
		case *nbdb.LogicalSwitchPort:
			if r.Type == "remote" && d.cfg.Central {
				d.Kick()
			}
		case *nbdb.NBGlobal:
			if d.cfg.Instance != "" {
				d.Kick() // created or deleted (its updates: below)
			}
		}
	}
	return &libcache.EventHandlerFuncs{
		AddFunc: func(_ string, m model.Model) { on(m) },
		UpdateFunc: func(_ string, old, cur model.Model) {
			o, ok1 := old.(*nbdb.NBGlobal)
			n, ok2 := cur.(*nbdb.NBGlobal)
			if ok1 && ok2 {
				// NB_Global changes with every northd round (nb_cfg,
				// hv_cfg): only the claim matters here.
				if d.cfg.Instance != "" && o.ExternalIDs[ovn.InstanceKey] != n.ExternalIDs[ovn.InstanceKey] {
					d.Kick()
				}
				return
			}
			on(old)
			on(cur)
		},
		DeleteFunc: func(_ string, m model.Model) { on(m) },
	}
}
