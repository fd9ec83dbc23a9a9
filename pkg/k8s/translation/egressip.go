package translation

import (
	"context"
	"fmt"
	eipt "github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"maps"
	"slices"

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
	"github.com/ovn-egress/ovn-egress/pkg/k8s/egressip"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/nbdbext"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// EgressIPConfig turns on the EgressIPs' rows: their pods' address sets,
// the reroutes to their nodes and their SNATs
// (translate.TranslateEgressIPs), on the central NB or, with Config.Zone,
// the zone's.
type EgressIPConfig struct {
	// Informers are the EgressIP informers (not yet started).
	Informers eipinformers.SharedInformerFactory
	// Standoff says when ovn-kubernetes' own EgressIP serves pods in this
	// NB (coexist.Detector): the rows ovn-egress wrote are then withdrawn
	// and none written. Required.
	Standoff EgressIPStandoff
}

// EgressIPStandoff tells the EgressIP rows to stand back, and why.
type EgressIPStandoff interface {
	EgressIPBlocked() (why string, blocked bool)
}

// EgressIPStats counts what the EgressIP rows did.
type EgressIPStats struct {
	// Syncs counts the syncs that converged EgressIP rows, Partial those of
	// them that read named EgressIPs only.
	Syncs, Partial int
	// Refused counts the syncs that wrote nothing (but the withdrawal of
	// ovn-egress's own EgressIP rows) because ovn-kubernetes' own EgressIP
	// serves pods in this NB.
	Refused int
	Events  int
}

// StandoffReason is the Event reason of an EgressIP stand-back (coexist.Reason).
const StandoffReason = "OVNKubernetesConflict"

// maxPartial bounds the EgressIPs one sync reads by name: more at once are
// read as every EgressIP.
const maxPartial = 64

// egressIPs is the EgressIP translator. Its keys name one EgressIP (a pod
// it selects changed, or its nodes) — the sync reads that object's pods
// only (egressip_partial.go), so that one pod's change costs in proportion
// to its objects, not to every EgressIP × every pod (146 ms per pod at
// 10,000 pods × 100 EgressIPs before; bench egressip) — or every EgressIP
// (startup, resync, a selector, a namespace's labels, a node's addresses,
// NB facts): every EgressIP, namespace, pod and node is read.
type egressIPs struct {
	cfg      Config
	standoff EgressIPStandoff
	log      *logrus.Entry
	nb       client.Client
	events   *egressip.Reporter
	recorder record.EventRecorder

	eipLister  eiplisters.EgressIPLister
	nsLister   corelisters.NamespaceLister
	podLister  corelisters.PodLister
	nodeLister corelisters.NodeLister
	sels       *selectors

	// standing: standing back, the rows are withdrawn (only the worker
	// touches it; StandingBack reads it).
	standing bool
	stats    EgressIPStats
}

// newEgressIPs wires the EgressIP translator to its informers; its
// handlers enqueue on work.
func newEgressIPs(cfg Config, log *logrus.Entry, nb client.Client, kubeInf kubeinformers.SharedInformerFactory,
	recorder record.EventRecorder, work *controller.Worker[Key]) (*egressIPs, []cache.InformerSynced, error) {
	ec := cfg.EgressIP
	if ec.Standoff == nil {
		return nil, nil, fmt.Errorf("egressip rows: no standoff (coexist.Detector) given")
	}
	eips, nss, pods, nodes := ec.Informers.K8s().V1().EgressIPs(), kubeInf.Core().V1().Namespaces(), kubeInf.Core().V1().Pods(), kubeInf.Core().V1().Nodes()
	var only map[translate.Reason]bool
	if cfg.Zone != "" {
		// Every zone sees the others' problems: only its own are Events.
		only = map[translate.Reason]bool{translate.ReasonTransitAddressMissing: true, eipt.ReasonEgressNodeUnusable: true}
	}
	r := &egressIPs{cfg: cfg, standoff: ec.Standoff, log: log, nb: nb, events: egressip.NewReporter(recorder, only), recorder: recorder,
		eipLister: eips.Lister(), nsLister: nss.Lister(), podLister: pods.Lister(), nodeLister: nodes.Lister(), sels: newSelectors()}
	all := func() { work.Add(egressIPKey("")) }
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{eips.Informer(), controller.OnChange(func(old, obj any) { r.onEgressIP(work, old, obj) })},
		{nss.Informer(), controller.OnChange(func(old, obj any) {
			o, _ := controller.As[*corev1.Namespace](old)
			n, _ := controller.As[*corev1.Namespace](obj)
			if o == nil || n == nil || !maps.Equal(o.Labels, n.Labels) {
				all()
			}
		})},
		{pods.Informer(), controller.OnChange(func(old, obj any) { r.onPod(work, old, obj) })},
		{nodes.Informer(), controller.OnChange(func(old, obj any) {
			o, _ := controller.As[*corev1.Node](old)
			n, _ := controller.As[*corev1.Node](obj)
			if o == nil || n == nil || !maps.Equal(o.Annotations, n.Annotations) {
				all() // the gateway routers' join addresses are annotations
			}
		})},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, nil, fmt.Errorf("egressip rows handler: %w", err)
		}
	}
	synced := []cache.InformerSynced{eips.Informer().HasSynced, nss.Informer().HasSynced, pods.Informer().HasSynced, nodes.Informer().HasSynced}
	return r, synced, nil
}

// podFactsDiffer reports whether a Pod update changes what selection reads.
func podFactsDiffer(a, b *corev1.Pod) bool {
	return !maps.Equal(a.Labels, b.Labels) || a.Status.Phase != b.Status.Phase ||
		a.Spec.HostNetwork != b.Spec.HostNetwork || !slices.Equal(a.Status.PodIPs, b.Status.PodIPs)
}

// rowKeys returns the EgressIP keys an NB row's change enqueues: an owned
// EgressIP row's object (drift is put back; a deleted object's rows are
// swept), every object when ovn-kubernetes' own EgressIP policies come or
// go, or, without NAT.match, when an EgressService NAT row comes or goes
// (the addresses an EgressIP SNATs leave to it).
func egressIPRowKeys(m model.Model) []Key {
	var ids map[string]string
	switch row := m.(type) {
	case *nbdb.AddressSet:
		ids = row.ExternalIDs
	case *nbdb.LogicalRouterPolicy:
		if row.ExternalIDs[translate.KeyOwnerType] == translate.OwnerEgressIP {
			return []Key{egressIPKey("")} // ours, or ovn-kubernetes' own EgressIP coming or going
		}
		ids = row.ExternalIDs
	case *nbdb.NAT:
		if _, ours := translate.KeyOf(row.ExternalIDs); ours {
			return []Key{egressIPKey("")}
		}
		return nil
	case *nbdbext.NAT:
		ids = row.ExternalIDs
	default:
		return nil
	}
	if k, ours := translate.KeyOf(ids); ours {
		if name, eip := k.EgressIP(); eip {
			return []Key{egressIPKey(name)}
		}
	}
	return nil
}

// sync returns the rows to write for the EgressIPs named ("" for every
// one) and what to report once they are written.
func (r *egressIPs) sync(ctx context.Context, names []string) (rowsPlan, func(), error) {
	if why, blocked := r.standoff.EgressIPBlocked(); blocked {
		return r.standBack(ctx, why)
	}
	if r.standing {
		r.standing = false
		r.log.Info("ovn-kubernetes' EgressIP no longer serves pods here; writing ovn-egress's EgressIP rows again")
		names = []string{""}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if names[0] != "" && len(names) <= maxPartial {
		return r.syncSome(ctx, names)
	}
	in, eips, problems, err := r.gather(ctx)
	if err != nil {
		return rowsPlan{}, nil, err
	}
	keys, served, err := ovn.EgressIPFacts(ctx, r.nb)
	if err != nil {
		return rowsPlan{}, nil, err
	}
	in.Served = served
	for _, e := range eips {
		keys = append(keys, translate.EgressIPKey(e.Name))
	}
	slices.Sort(keys)
	desired := eipt.TranslateEgressIPs(in)
	r.stats.Syncs++
	return rowsPlan{keys: slices.Compact(keys), desired: desired}, r.report(eips, append(problems, desired.Problems...), nil), nil
}

// report returns what reports eips' problems once their rows are written:
// of every EgressIP when scope is nil, else of the names in scope (an
// object no longer there is forgotten).
func (r *egressIPs) report(eips []*egressipv1.EgressIP, problems translate.Problems, scope []string) func() {
	return func() { r.stats.Events += r.events.Report(eips, problems, scope) }
}

// standBack withdraws every EgressIP row ovn-egress wrote here, in one
// transaction, while ovn-kubernetes' own EgressIP serves pods in this NB:
// kept, they would steer the same pods as its rows at the same priority
// (OVN picks between equal priorities in no defined order), and could not
// follow a reassignment (seen: two reroutes of one pod to two nodes, the IP
// SNATed on two routers). Each EgressIP gets a Warning Event once.
func (r *egressIPs) standBack(ctx context.Context, why string) (rowsPlan, func(), error) {
	keys, _, err := ovn.EgressIPFacts(ctx, r.nb)
	if err != nil {
		return rowsPlan{}, nil, err
	}
	first := !r.standing
	r.standing = true
	r.stats.Refused++
	after := func() {
		if !first {
			return
		}
		r.log.WithField("withdrawn", len(keys)).Warn(why)
		if eips, err := r.eipLister.List(labels.Everything()); err == nil && r.recorder != nil {
			for _, e := range eips {
				r.recorder.Event(e, corev1.EventTypeWarning, StandoffReason, why)
			}
		}
	}
	return rowsPlan{keys: keys, desired: &translate.Desired{Rows: map[translate.Key]*translate.Rows{}}}, after, nil
}

// gather reads every EgressIP with status.items and the pods it selects,
// and the nodes' gateway router addresses.
func (r *egressIPs) gather(ctx context.Context) (eipt.EgressIPRowsInput, []*egressipv1.EgressIP, translate.Problems, error) {
	eips, err := r.eipLister.List(labels.Everything())
	if err != nil {
		return eipt.EgressIPRowsInput{}, nil, nil, err
	}
	nss, err := r.nsLister.List(labels.Everything())
	if err != nil {
		return eipt.EgressIPRowsInput{}, nil, nil, err
	}
	pods, err := r.podLister.List(labels.Everything())
	if err != nil {
		return eipt.EgressIPRowsInput{}, nil, nil, err
	}
	nodes, err := r.nodeLister.List(labels.Everything())
	if err != nil {
		return eipt.EgressIPRowsInput{}, nil, nil, err
	}
	in, problems := eipt.EgressIPRowsFrom(r.cfg.Translate, eips, nss, pods, nodes)
	if r.cfg.Zone != "" {
		in.InZone(r.cfg.Zone, pods)
	}
	return in, eips, problems, ctx.Err()
}
