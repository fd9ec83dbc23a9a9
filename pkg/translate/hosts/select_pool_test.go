package hosts

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestSelectHostsPoolsMatchAScan checks the shared pools and the heap
// against the rule they implement, on random clusters: every EgressService
// is replayed in SelectHosts' order, its candidates found by scanning every
// node, and the host chosen must be the least loaded of them (steady before
// Recovering, ties by name), with the allocations counted as it goes.
func TestSelectHostsPoolsMatchAScan(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, seed))
			w := newWorld(4 + r.IntN(40))
			in := w.selectIn()
			in.Reachable, in.Recovering = map[string]bool{}, map[string]bool{}
			zones := []string{"a", "b", "c"}
			for _, name := range slices.Sorted(maps.Keys(in.Nodes)) { // the seed alone decides
				n := in.Nodes[name]
				n.Ready = r.IntN(8) != 0
				n.Labels = map[string]string{"zone": zones[r.IntN(3)]}
				if r.IntN(2) == 0 {
					n.Labels["egress"] = ""
				}
				switch r.IntN(10) {
				case 0:
					in.Reachable[name] = false
				case 1:
					in.Recovering[name] = true
				}
			}
			if r.IntN(3) == 0 {
				in.Allocations = map[string]int{"node1": r.IntN(5), "node2": r.IntN(5)}
			}
			selectors := []metav1.LabelSelector{{}, {MatchLabels: map[string]string{"zone": "a"}},
				{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "egress", Operator: metav1.LabelSelectorOpExists}}},
				{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"b", "c"}}}},
				{MatchLabels: map[string]string{"zone": "nowhere"}}}
			for i := range 20 + r.IntN(200) {
				k := fmt.Sprintf("ns%d/svc%03d", i%3, i)
				host := ""
				if r.IntN(3) == 0 {
					host = fmt.Sprintf("node%d", 1+r.IntN(len(in.Nodes)+2))
				}
				w.ES(k, host).Spec.NodeSelector = selectors[r.IntN(len(selectors))]
				s := w.Svc(k, "172.18.0.9")
				if r.IntN(3) == 0 {
					s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				}
				var eps []string
				for range 1 + r.IntN(4) {
					eps = append(eps, fmt.Sprintf("10.244.1.%d@node%d", 1+r.IntN(250), 1+r.IntN(len(in.Nodes))))
				}
				w.EPs(k, eps...)
			}
			in.EgressServices, in.Services, in.EndpointSlices = w.In.EgressServices, w.In.Services, w.In.EndpointSlices
			res := SelectHosts(in)
			replaySelection(t, in, res)
		})
	}
}

// replaySelection is the oracle: the placement rule by scanning every node
// for every EgressService, as SelectHosts did before it shared pools.
func replaySelection(t *testing.T, in SelectInput, res SelectResult) {
	t.Helper()
	alloc := map[string]int{}
	for n, c := range in.Allocations {
		alloc[n] += c
	}
	// candidates also returns the nodes that are not, by first failing test.
	candidates := func(es *egressv1.EgressService) ([]string, exclusions) {
		sel, err := metav1.LabelSelectorAsSelector(&es.Spec.NodeSelector)
		if err != nil {
			t.Fatal(err)
		}
		svc := in.Services[translate.EgressServiceKey(es)]
		var local map[string]bool
		if translate.ETPLocal(svc) {
			local = endpointNodes(svc, in.EndpointSlices[translate.EgressServiceKey(es)])
		}
		var out []string
		var ex exclusions
		for _, name := range slices.Sorted(maps.Keys(in.Nodes)) { // by name, as strings
			n := in.Nodes[name]
			r, ok := in.Reachable[name]
			switch {
			case !n.Ready:
				ex.notReady++
			case !sel.Matches(labels.Set(n.Labels)):
				ex.noMatch++
			case local != nil && !local[name]:
				ex.noLocal++
			case ok && !r:
				ex.unreachable++
			default:
				out = append(out, name)
			}
		}
		return out, ex
	}
	var pending []*egressv1.EgressService
	for _, es := range translate.SortedEgressServices(in.EgressServices) {
		k := translate.EgressServiceKey(es)
		sel := res.Selections[k]
		cands, _ := candidates(es)
		kept := false
		for _, c := range cands {
			kept = kept || c == es.Status.Host
		}
		switch {
		case kept:
			if sel.Host != es.Status.Host {
				t.Fatalf("%s: host %s is a candidate but was given up for %q", k, es.Status.Host, sel.Host)
			}
			alloc[sel.Host]++
		default:
			pending = append(pending, es)
		}
	}
	for _, es := range pending {
		k := translate.EgressServiceKey(es)
		best := ""
		cands, ex := candidates(es)
		for _, c := range cands {
			if best == "" || in.Recovering[best] && !in.Recovering[c] ||
				in.Recovering[best] == in.Recovering[c] && alloc[c] < alloc[best] {
				best = c
			}
		}
		if got := res.Selections[k].Host; got != best {
			t.Fatalf("%s: placed on %q; the scan says %q (allocations %v)", k, got, best, alloc)
		}
		if best != "" {
			alloc[best]++
			continue
		}
		want := fmt.Sprintf("no node can host it: of %d nodes, %s", len(in.Nodes), ex)
		found := false
		for _, p := range res.Problems.For(k) {
			found = found || p.Reason == translate.ReasonNoEligibleNode && p.Message == want
		}
		if !found {
			t.Fatalf("%s: problems %v; want NoEligibleNode %q", k, res.Problems.For(k), want)
		}
	}
	for n, c := range alloc {
		if res.Allocations[n] != c {
			t.Fatalf("allocations of %s: %d; the scan counts %d", n, res.Allocations[n], c)
		}
	}
}
