package egressip

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// ReasonInvalidSelector: an EgressIP's namespaceSelector or podSelector
// cannot be used (a key or value the API server did not check).
const ReasonInvalidSelector translate.Reason = "InvalidSelector"

// EgressIPPods are the pod addresses an EgressIP selects, by family, each
// list sorted and without repeats: the members of its address set.
type EgressIPPods map[ipfamily.Family][]netip.Addr

// SelectEgressIPPods returns the addresses of the pods eip selects: pods of
// the namespaces matching namespaceSelector that match podSelector (unset:
// every pod), not host-networked, not finished (Succeeded or Failed), with
// their status.podIPs inside clusterSubnets (an address outside every
// cluster subnet is a host address and never rerouted). An invalid selector
// selects nothing and is a Problem.
func SelectEgressIPPods(eip *egressipv1.EgressIP, namespaces []*corev1.Namespace, pods []*corev1.Pod, clusterSubnets []netip.Prefix) (EgressIPPods, translate.Problems) {
	var problems translate.Problems
	nsSel, err := metav1.LabelSelectorAsSelector(&eip.Spec.NamespaceSelector)
	if err != nil {
		problems.Add(eip.Name, ReasonInvalidSelector, "spec.namespaceSelector is invalid: %v", err)
		return EgressIPPods{}, problems
	}
	podSel, err := metav1.LabelSelectorAsSelector(&eip.Spec.PodSelector)
	if err != nil {
		problems.Add(eip.Name, ReasonInvalidSelector, "spec.podSelector is invalid: %v", err)
		return EgressIPPods{}, problems
	}
	selected := map[string]bool{}
	for _, ns := range namespaces {
		if nsSel.Matches(labels.Set(ns.Labels)) {
			selected[ns.Name] = true
		}
	}
	out := EgressIPPods{}
	for _, p := range pods {
		if !selected[p.Namespace] || p.Spec.HostNetwork || podFinished(p) || !podSel.Matches(labels.Set(p.Labels)) {
			continue
		}
		for _, pip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(pip.IP)
			if err != nil {
				continue
			}
			a = ipfamily.Canonical(a)
			if slices.ContainsFunc(clusterSubnets, func(s netip.Prefix) bool { return s.Contains(a) }) {
				f := ipfamily.Of(a)
				out[f] = append(out[f], a)
			}
		}
	}
	for f, as := range out {
		slices.SortFunc(as, func(a, b netip.Addr) int { return a.Compare(b) })
		out[f] = slices.Compact(as)
	}
	return out, problems
}

func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
