package egressip

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	libcache "github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/informers/externalversions"
	eiplisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/listers/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/nbdbext"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// RowsConfig tunes the rows controller.
type RowsConfig struct {
	// Translate is the master's translation configuration (cluster and join
	// subnets, families, the allow policies' priority); NATMatch is taken
	// from the NB.
	Translate translate.Config
	// MaxOps bounds the operations of one NB transaction (0: the applier's
	// default).
	MaxOps int
	// ResyncInterval converges everything periodically (0 disables).
	ResyncInterval time.Duration
	// Zone, when set, writes the rows of that interconnect zone into its own
	// NB (a node agent's zone translation): the reroutes of the zone's pods
	// and the SNATs of its egress nodes (translate.EgressIPRowsInput.Zone).
	// Only the problems that are the zone's own become Events then (every
	// zone sees the others).
	Zone string
	// Work, when set, records the worker's syncs; NB, its transactions.
	Work *controller.Metrics
	NB   *ovn.Metrics
	// Standoff says when ovn-kubernetes' own EgressIP serves pods in this
	// NB (coexist.Detector): the controller then withdraws the rows it
	// wrote and writes none. Required.
	Standoff Standoff
}

// Standoff tells the EgressIP controllers to write nothing, and why.
type Standoff interface {
	EgressIPBlocked() (why string, blocked bool)
}

// Rows writes the NB rows of every assigned EgressIP on the central NB, or
// on one interconnect zone's (RowsConfig.Zone):
// its pods' address sets, the reroutes to its nodes and their SNATs
// (translate.TranslateEgressIPs). It is level-driven on two kinds of key.
// all (startup, resync, an EgressIP's selection, a namespace's labels, a
// node's addresses, NB facts): a sync reads every EgressIP, namespace, pod
// and node from the listers, the owned EgressIP keys and the services'
// SNATs from the NB cache, and applies the difference in one transaction.
// An EgressIP's name (a pod it selects changed, or its nodes): a sync
// reads that object's pods only (rows_partial.go), so that one pod's change
// costs in proportion to its objects, not to every EgressIP × every pod
// (146 ms per pod at 10,000 pods × 100 EgressIPs before; bench egressip).
type Rows struct {
	oneKey
	cfg     RowsConfig
	nb      client.Client
	applier *ovn.Applier
	events  *reporter

	eipLister  eiplisters.EgressIPLister
	nsLister   corelisters.NamespaceLister
	podLister  corelisters.PodLister
	nodeLister corelisters.NodeLister
	sels       *selectors

	recorder record.EventRecorder
	mu       sync.Mutex
	stats    RowsStats
	standing bool // standing back: the rows are withdrawn
}

// RowsStats counts what the rows controller did since it was built.
type RowsStats struct {
	Syncs, Transactions, Changes, Events int
	// Refused counts the syncs that wrote nothing (but the withdrawal of
	// ovn-egress's own EgressIP rows) because ovn-kubernetes' own EgressIP
	// serves pods in this NB.
	Refused int
	// Partial counts the syncs of named EgressIPs only (part of Syncs).
	Partial int
}

// NewRows wires the rows controller to the informer factories (not started
// yet) and a connected NB client whose monitor is complete.
func NewRows(cfg RowsConfig, log *logrus.Entry, nb client.Client, kubeInf kubeinformers.SharedInformerFactory,
	eipInf eipinformers.SharedInformerFactory, recorder record.EventRecorder) (*Rows, error) {
	cfg.Translate.NATMatch = ovn.FeaturesOf(nb).NATMatch
	if err := cfg.Translate.Validate(); err != nil {
		return nil, err
	}
	if cfg.Standoff == nil {
		return nil, fmt.Errorf("egressip rows: no standoff (coexist.Detector) given")
	}
	if cfg.ResyncInterval < 0 {
		return nil, fmt.Errorf("negative resync interval")
	}
	eips, nss, pods, nodes := eipInf.K8s().V1().EgressIPs(), kubeInf.Core().V1().Namespaces(), kubeInf.Core().V1().Pods(), kubeInf.Core().V1().Nodes()
	events := newReporter(recorder)
	if cfg.Zone != "" {
		events.only = map[translate.Reason]bool{translate.ReasonTransitAddressMissing: true, translate.ReasonEgressNodeUnusable: true}
	}
	r := &Rows{cfg: cfg, nb: nb, applier: ovn.NewApplier(nb, cfg.MaxOps).WithMetrics(cfg.NB), events: events, recorder: recorder,
		eipLister: eips.Lister(), nsLister: nss.Lister(), podLister: pods.Lister(), nodeLister: nodes.Lister(),
		sels: newSelectors()}
	r.oneKey = newOneKey("egress IP rows", "egressip-rows", rowsBatch, log, cfg.Work, r.sync,
		[]cache.InformerSynced{eips.Informer().HasSynced, nss.Informer().HasSynced, pods.Informer().HasSynced, nodes.Informer().HasSynced})
	r.resync = cfg.ResyncInterval
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{eips.Informer(), controller.OnChange(r.onEgressIP)},
		{nss.Informer(), controller.OnChange(func(old, obj any) {
			o, _ := controller.As[*corev1.Namespace](old)
			n, _ := controller.As[*corev1.Namespace](obj)
			if o == nil || n == nil || !maps.Equal(o.Labels, n.Labels) {
				r.enqueue()
			}
		})},
		{pods.Informer(), controller.OnChange(r.onPod)},
		{nodes.Informer(), controller.OnChange(func(old, obj any) {
			o, _ := controller.As[*corev1.Node](old)
			n, _ := controller.As[*corev1.Node](obj)
			if o == nil || n == nil || !maps.Equal(o.Annotations, n.Annotations) {
				r.enqueue() // the gateway routers' join addresses are annotations
			}
		})},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("egressip rows handler: %w", err)
		}
	}
	nb.Cache().AddEventHandler(&libcache.EventHandlerFuncs{
		AddFunc:    func(_ string, m model.Model) { r.onRow(m) },
		UpdateFunc: func(_ string, _, m model.Model) { r.onRow(m) },
		DeleteFunc: func(_ string, m model.Model) { r.onRow(m) },
	})
	return r, nil
}

// podFactsDiffer reports whether a Pod update changes what selection reads.
func podFactsDiffer(a, b *corev1.Pod) bool {
	return !maps.Equal(a.Labels, b.Labels) || a.Status.Phase != b.Status.Phase ||
		a.Spec.HostNetwork != b.Spec.HostNetwork || !slices.Equal(a.Status.PodIPs, b.Status.PodIPs)
}

// onRow enqueues a sync when an owned EgressIP row changes (drift is put
// back; the echo of the controller's own write is one sync that writes
// nothing), when ovn-kubernetes' own EgressIP policies come or go, or,
// without NAT.match, when an EgressService NAT row comes or
// goes (the addresses the EgressIP SNATs leave to it).
func (r *Rows) onRow(m model.Model) {
	var ids map[string]string
	switch row := m.(type) {
	case *nbdb.AddressSet:
		ids = row.ExternalIDs
	case *nbdb.LogicalRouterPolicy:
		if row.ExternalIDs[translate.KeyOwnerType] == translate.OwnerEgressIP {
			r.enqueue() // ours, or ovn-kubernetes' own EgressIP coming or going
			return
		}
		ids = row.ExternalIDs
	case *nbdb.NAT:
		if _, ours := translate.KeyOf(row.ExternalIDs); ours {
			r.enqueue()
		}
		return
	case *nbdbext.NAT:
		ids = row.ExternalIDs
	default:
		return
	}
	if k, ours := translate.KeyOf(ids); ours {
		if name, eip := k.EgressIP(); eip {
			r.work.Add(name) // that object's rows alone (a deleted one's are swept)
		}
	}
}

// Stats returns the counters so far.
func (r *Rows) Stats() RowsStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// sync converges every EgressIP's rows when names hold all, else those of
// the EgressIPs named.
func (r *Rows) sync(ctx context.Context, names []string) error {
	if why, blocked := r.cfg.Standoff.EgressIPBlocked(); blocked {
		return r.standBack(ctx, why)
	}
	r.mu.Lock()
	resumed := r.standing
	r.standing = false
	r.mu.Unlock()
	if resumed {
		r.log.Info("ovn-kubernetes' EgressIP no longer serves pods here; writing ovn-egress's EgressIP rows again")
		names = []string{all}
	}
	if !slices.Contains(names, all) {
		return r.syncSome(ctx, names)
	}
	in, eips, problems, err := r.gather(ctx)
	if err != nil {
		return err
	}
	keys, served, err := ovn.EgressIPFacts(ctx, r.nb)
	if err != nil {
		return err
	}
	in.Served = served
	for _, e := range eips {
		keys = append(keys, translate.EgressIPKey(e.Name))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return r.apply(ctx, keys, translate.TranslateEgressIPs(in), eips, problems, nil)
}

// standBack withdraws every EgressIP row ovn-egress wrote here, in one
// transaction, while ovn-kubernetes' own EgressIP serves pods in this NB:
// kept, they would steer the same pods as its rows at the same priority
// (OVN picks between equal priorities in no defined order), and could not
// follow a reassignment (seen: two reroutes of one pod to two nodes, the IP
// SNATed on two routers). Each EgressIP gets a Warning Event once.
func (r *Rows) standBack(ctx context.Context, why string) error {
	keys, _, err := ovn.EgressIPFacts(ctx, r.nb)
	if err != nil {
		return err
	}
	r.mu.Lock()
	first := !r.standing
	r.standing = true
	r.stats.Refused++
	r.mu.Unlock()
	if len(keys) > 0 {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := r.applier.Apply(actx, keys, &translate.Desired{Rows: map[translate.Key]*translate.Rows{}})
		r.mu.Lock()
		r.stats.Transactions += st.Transactions
		r.stats.Changes += st.Changes
		r.mu.Unlock()
		if err != nil {
			return fmt.Errorf("withdraw ovn-egress's EgressIP rows: %w", err)
		}
	}
	if first {
		r.log.WithField("withdrawn", len(keys)).Warn(why)
		if eips, err := r.eipLister.List(labels.Everything()); err == nil && r.recorder != nil {
			for _, e := range eips {
				r.recorder.Event(e, corev1.EventTypeWarning, StandoffReason, why)
			}
		}
	}
	return nil
}

// StandingBack reports whether the controller stands back (readiness).
func (r *Rows) StandingBack() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.standing
}

// StandoffReason is the Event reason of a stand-back (coexist.Reason).
const StandoffReason = "OVNKubernetesConflict"

// apply writes desired for keys in one transaction and reports the
// problems of eips — of every EgressIP when scope is nil, else of the
// names in scope (an object no longer there is forgotten).
func (r *Rows) apply(ctx context.Context, keys []translate.Key, desired *translate.Desired, eips []*egressipv1.EgressIP,
	problems translate.Problems, scope []string) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := r.applier.Apply(actx, keys, desired)
	r.mu.Lock()
	r.stats.Syncs++
	if scope != nil {
		r.stats.Partial++
	}
	r.stats.Transactions += st.Transactions
	r.stats.Changes += st.Changes
	r.mu.Unlock()
	if err != nil {
		return err
	}
	n := r.events.report(eips, append(problems, desired.Problems...), scope)
	r.mu.Lock()
	r.stats.Events += n
	r.mu.Unlock()
	if st.Changes > 0 {
		r.log.WithField("egressips", len(eips)).WithField("changes", st.Changes).Debug("egress IP rows converged")
	}
	return nil
}

// gather reads every EgressIP with status.items and the pods it selects,
// and the nodes' gateway router addresses.
func (r *Rows) gather(ctx context.Context) (translate.EgressIPRowsInput, []*egressipv1.EgressIP, translate.Problems, error) {
	eips, err := r.eipLister.List(labels.Everything())
	if err != nil {
		return translate.EgressIPRowsInput{}, nil, nil, err
	}
	nss, err := r.nsLister.List(labels.Everything())
	if err != nil {
		return translate.EgressIPRowsInput{}, nil, nil, err
	}
	pods, err := r.podLister.List(labels.Everything())
	if err != nil {
		return translate.EgressIPRowsInput{}, nil, nil, err
	}
	nodes, err := r.nodeLister.List(labels.Everything())
	if err != nil {
		return translate.EgressIPRowsInput{}, nil, nil, err
	}
	in, problems := translate.EgressIPRowsFrom(r.cfg.Translate, eips, nss, pods, nodes)
	if r.cfg.Zone != "" {
		in.InZone(r.cfg.Zone, pods)
	}
	return in, eips, problems, ctx.Err()
}
