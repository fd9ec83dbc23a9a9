package translation

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// selectors holds the parsed selectors of every assigned EgressIP, so that
// a pod's event finds the objects it concerns without parsing them again.
//
// It may lag the listers: an EgressIP whose add or update has not reached
// its handler yet is missing or stale here, and that handler, when it
// runs, enqueues every object (onEgressIP) — after the pods' changes it
// missed.
type selectors struct {
	mu sync.RWMutex
	by map[string]parsedSelectors
}

type parsedSelectors struct{ ns, pod labels.Selector }

func newSelectors() *selectors { return &selectors{by: map[string]parsedSelectors{}} }

// set records e's selectors; an unassigned object (no rows) or one whose
// selectors do not parse (the full sync reports it) is left out.
func (s *selectors) set(e *egressipv1.EgressIP) {
	ns, nsErr := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector)
	pod, podErr := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector)
	s.mu.Lock()
	defer s.mu.Unlock()
	if nsErr != nil || podErr != nil || len(e.Status.Items) == 0 {
		delete(s.by, e.Name)
		return
	}
	s.by[e.Name] = parsedSelectors{ns: ns, pod: pod}
}

func (s *selectors) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.by, name)
}

// matching appends to out the EgressIPs that select a pod with podLabels in
// a namespace with nsLabels.
func (s *selectors) matching(nsLabels, podLabels labels.Set, out []string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name, sel := range s.by {
		if sel.ns.Matches(nsLabels) && sel.pod.Matches(podLabels) {
			out = append(out, name)
		}
	}
	return out
}

// onEgressIP: an object whose nodes alone changed is synced by name; one
// that came, went or changed what it selects (its selectors, or whether it
// is assigned at all) may take pods from the objects after it by name or
// leave them some: every object is synced.
func (r *egressIPs) onEgressIP(work *controller.Worker[Key], old, obj any) {
	o, _ := controller.As[*egressipv1.EgressIP](old)
	n, _ := controller.As[*egressipv1.EgressIP](obj)
	if n == nil {
		if o != nil {
			r.sels.forget(o.Name)
		}
		work.Add(egressIPKey(""))
		return
	}
	r.sels.set(n)
	if o != nil && equality.Semantic.DeepEqual(o.Spec, n.Spec) && (len(o.Status.Items) == 0) == (len(n.Status.Items) == 0) {
		work.Add(egressIPKey(n.Name))
		return
	}
	work.Add(egressIPKey(""))
}

// onPod syncs the EgressIPs that select the pod before or after its change.
func (r *egressIPs) onPod(work *controller.Worker[Key], old, obj any) {
	o, _ := controller.As[*corev1.Pod](old)
	n, _ := controller.As[*corev1.Pod](obj)
	if o != nil && n != nil && !podFactsDiffer(o, n) {
		return
	}
	pod := n
	if pod == nil {
		pod = o
	}
	if pod == nil {
		return // not a pod
	}
	ns, err := r.nsLister.Get(pod.Namespace) // a pod never changes namespace
	if err != nil {
		return // its namespace's arrival syncs every object
	}
	var names []string
	for _, p := range []*corev1.Pod{o, n} {
		if p != nil {
			names = r.sels.matching(labels.Set(ns.Labels), labels.Set(p.Labels), names)
		}
	}
	slices.Sort(names)
	keys := make([]Key, 0, len(names))
	for _, n := range slices.Compact(names) {
		keys = append(keys, egressIPKey(n))
	}
	work.Add(keys...)
}

// syncSome converges the rows of the EgressIPs named: each one's pods are
// read from its namespaces only (the pod lister's namespace index), and
// the objects before it by name — which a pod selected by two leaves
// through — are matched against those pods alone. A name without an
// assigned object has its rows swept.
func (r *egressIPs) syncSome(ctx context.Context, names []string) (rowsPlan, func(), error) {
	eips, err := r.eipLister.List(labels.Everything())
	if err != nil {
		return rowsPlan{}, nil, err
	}
	slices.SortFunc(eips, func(a, b *egressipv1.EgressIP) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(names)
	last := names[len(names)-1]
	in := egressip.EgressIPRowsInput{Config: r.cfg.Translate, Nodes: map[string]*translate.NodeInfo{}}
	var mine []*egressipv1.EgressIP
	var candidates []*corev1.Pod
	own := map[string][]*corev1.Pod{}
	for _, e := range eips {
		if len(e.Status.Items) == 0 || !slices.Contains(names, e.Name) {
			continue
		}
		mine = append(mine, e)
		pods, err := r.selectable(e)
		if err != nil {
			return rowsPlan{}, nil, fmt.Errorf("egressip %s: %w", e.Name, err)
		}
		own[e.Name] = pods
		candidates = append(candidates, pods...)
		for _, it := range e.Status.Items {
			if n, err := r.nodeLister.Get(it.Node); err == nil {
				in.Nodes[n.Name] = translate.ParseNode(n, r.cfg.Translate.JoinSubnets)
			}
		}
	}
	nss := r.namespacesOf(candidates)
	var problems translate.Problems
	for _, e := range eips {
		if len(e.Status.Items) == 0 || strings.Compare(e.Name, last) > 0 {
			continue // unassigned, or after every object synced: it takes none of their pods
		}
		pods, mineToo := own[e.Name]
		if !mineToo {
			pods = candidates // an object before: only which of these it takes matters
		}
		sel, p := egressip.SelectEgressIPPods(e, nss, pods, r.cfg.Translate.ClusterSubnets)
		if mineToo {
			problems = append(problems, p...)
		}
		in.Objects = append(in.Objects, egressip.EgressIPObject{EgressIP: e, Pods: sel})
	}
	if r.cfg.Zone != "" {
		in.Zone = r.cfg.Zone
		in.LocalPods = egressip.ZonePodAddresses(candidates, r.zoneOf, r.cfg.Zone)
	}
	if !r.cfg.Translate.NATMatch {
		if in.Served, err = ovn.ServedAddresses(ctx, r.nb); err != nil {
			return rowsPlan{}, nil, err
		}
	}
	all := egressip.TranslateEgressIPs(in)
	desired := &translate.Desired{Rows: map[translate.Key]*translate.Rows{}}
	keys := make([]translate.Key, 0, len(names))
	for _, name := range names {
		k := translate.EgressIPKey(name)
		keys = append(keys, k)
		if rows, ok := all.Rows[k]; ok {
			desired.Rows[k] = rows
		}
		desired.Problems = append(desired.Problems, all.Problems.For(name)...)
	}
	r.stats.Syncs++
	r.stats.Partial++
	return rowsPlan{keys: keys, desired: desired}, r.report(mine, append(problems, desired.Problems...), names), nil
}

// zoneOf is the interconnect zone of a node ("" when it is not known).
func (r *egressIPs) zoneOf(node string) string {
	n, err := r.nodeLister.Get(node)
	if err != nil {
		return ""
	}
	return egressip.NodeZone(n)
}

// selectable are the pods of e's namespaces that its pod selector matches
// (none when a selector does not parse: SelectEgressIPPods reports it).
func (r *egressIPs) selectable(e *egressipv1.EgressIP) ([]*corev1.Pod, error) {
	nsSel, err := metav1.LabelSelectorAsSelector(&e.Spec.NamespaceSelector)
	if err != nil {
		return nil, nil
	}
	podSel, err := metav1.LabelSelectorAsSelector(&e.Spec.PodSelector)
	if err != nil {
		return nil, nil
	}
	nss, err := r.nsLister.List(nsSel)
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, ns := range nss {
		pods, err := r.podLister.Pods(ns.Name).List(podSel)
		if err != nil {
			return nil, err
		}
		out = append(out, pods...)
	}
	return out, nil
}

// namespacesOf are the namespaces of pods.
func (r *egressIPs) namespacesOf(pods []*corev1.Pod) []*corev1.Namespace {
	seen := map[string]bool{}
	var out []*corev1.Namespace
	for _, p := range pods {
		if seen[p.Namespace] {
			continue
		}
		seen[p.Namespace] = true
		ns, err := r.nsLister.Get(p.Namespace)
		if err != nil {
			continue // gone meanwhile: its deletion syncs every object
		}
		out = append(out, ns)
	}
	return out
}
