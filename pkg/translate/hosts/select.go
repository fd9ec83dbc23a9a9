package hosts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// Host selection (DESIGN §4): which node serves each EgressService
// (status.host) and which egress-service labels every node carries. It
// follows ovn-kubernetes' cluster manager (reference §2.2, §2.3) and closes
// its gaps: the choice is deterministic, reachability is an input, and long
// names still give valid label keys.

// Reasons of host selection. HostAssigned and HostChanged are reported by
// the controller when it writes a new status.host; HostUnreachable is a
// problem SelectHosts finds.
const (
	ReasonHostAssigned    translate.Reason = "HostAssigned"
	ReasonHostChanged     translate.Reason = "HostChanged"
	ReasonHostUnreachable translate.Reason = "HostUnreachable"
)

// NodeLabelPrefix starts the key of every node label host selection owns.
const NodeLabelPrefix = "egress-service.k8s.ovn.org/"

// Label names (the part after the prefix) are at most 63 characters; a
// longer "<namespace>-<name>" keeps its first labelKeep characters and gets
// "-" and labelHashLen hex digits of SHA-256("<namespace>/<name>").
const (
	maxLabelName = validation.LabelValueMaxLength
	labelHashLen = 10
	labelKeep    = maxLabelName - 1 - labelHashLen
)

// SelectInput is everything host selection reads.
type SelectInput struct {
	// ClusterSubnets tell cluster-networked endpoints from host-networked ones.
	ClusterSubnets []netip.Prefix
	// EgressServices to decide, with their current status.host.
	EgressServices []*egressv1.EgressService
	// Services by "namespace/name".
	Services map[string]*corev1.Service
	// EndpointSlices by the "namespace/name" of their Service.
	EndpointSlices map[string][]*discoveryv1.EndpointSlice
	// Nodes by name; only Name, Ready and Labels are read.
	Nodes map[string]*translate.NodeInfo
	// Reachable is the health-check verdict by node name; a node that is
	// absent counts as reachable.
	Reachable map[string]bool
	// Recovering are reachable nodes in their hold-down after being
	// unreachable: candidates of last resort, placed on only when no other
	// candidate exists (the damping rule: a flapping node does not draw
	// services while a steady one can take them).
	Recovering map[string]bool
	// Allocations counts, per node, the LoadBalancerIP EgressServices hosted
	// there that are NOT in EgressServices (a controller deciding a few keys
	// passes the hosts of all the others).
	Allocations map[string]int
	// Networks and NodeIPs (every node's own addresses, by address): a
	// load-balancer ingress IP inside them is never an egress source.
	Networks translate.IngressNetworks
	NodeIPs  map[netip.Addr]string
	// IngressClaims are, by load-balancer ingress IP, the LoadBalancerIP
	// EgressServices ("namespace/name") whose Service has that IP, these
	// included: an IP of two namespaces hosts neither.
	IngressClaims map[netip.Addr][]string
	// LabelClaims are, by host label (NodeLabel), the LoadBalancerIP
	// EgressServices with that label, these included: only the earliest
	// created of two that collide is hosted.
	LabelClaims map[string][]LabelClaim
	// Damped are EgressServices whose tenant changed spec.nodeSelector
	// again soon after a selector change moved them (the controller keeps
	// the record and the window): their current host stays while the only
	// reason to leave it is that it no longer matches the selector — never
	// when it is not Ready, unreachable or without a local endpoint.
	Damped map[string]bool
	// MaxPerNode caps the LoadBalancerIP EgressServices a node is given
	// (0: no cap): each is a label on the Node, and every watcher of Nodes
	// receives the whole object at each change. A host already past the cap
	// keeps what it has.
	MaxPerNode int
	// KeepAssigned keeps every non-empty status.host exactly as given
	// (counted as an allocation) and only decides the empty ones: the offline
	// `translate --select-hosts` mode.
	KeepAssigned bool
}

// Selection is the decision for one EgressService.
type Selection struct {
	// Host is the status.host it should have: "", a node name, or "ALL".
	Host string
	// Current is status.host as it was given.
	Current string
	// Why says why Current, a node, is given up ("" when it is kept or
	// Current was not a node).
	Why string
	// Cause is Why as a fixed word (a metric label): one of the Cause*
	// constants, "" when Why is.
	Cause string
	// Damped: Host is Current, kept although it no longer matches
	// spec.nodeSelector (SelectInput.Damped).
	Damped bool
}

// Why a host is given up, as a metric label.
const (
	CauseNodeGone        = "node_gone"
	CauseNotReady        = "not_ready"
	CauseSelector        = "selector"
	CauseNoLocalEndpoint = "no_local_endpoint"
	CauseUnreachable     = "unreachable"
	// CauseService: the Service no longer qualifies (not found, not a
	// LoadBalancer, no ingress IP, no endpoints, sourceIPBy Network).
	CauseService = "service"
)

// Changed reports whether status.host must be written.
func (s Selection) Changed() bool { return s.Host != s.Current }

// SelectResult is the outcome of SelectHosts.
type SelectResult struct {
	// Selections by "namespace/name" of the EgressService.
	Selections map[string]Selection
	// Problems are the reasons a user may act on (ServiceNotFound,
	// ServiceNotLoadBalancer, NoIngressIP, MultipleIngressIPs, NoEndpoints,
	// InvalidNodeSelector, NoEligibleNode, HostUnreachable), in the order of
	// the EgressServices.
	Problems translate.Problems
	// Allocations counts the LoadBalancerIP EgressServices per node after
	// the decisions, the input's Allocations included.
	Allocations map[string]int
}

// SelectHosts decides the host of every EgressService of the input:
//
//   - no Service → "" (ServiceNotFound);
//   - sourceIPBy Network → "ALL", as ovn-kubernetes does, whatever the
//     Service's type, ingress or endpoints (those are reported as problems:
//     nothing is rerouted for a Service that is not a LoadBalancer);
//   - otherwise (empty sourceIPBy is LoadBalancerIP): a Service that is not
//     a LoadBalancer, has no ingress IP or no cluster-networked endpoint → "";
//     an invalid nodeSelector → "" (InvalidNodeSelector), never a panic;
//   - candidates are the nodes that are Ready, match spec.nodeSelector
//     (apimachinery's selector; empty matches every node), are reachable
//     and, for externalTrafficPolicy Local, have an endpoint of the Service
//     (any endpoint with that nodeName, host-networked ones included, as
//     upstream);
//   - sticky: the current host is kept while it is a candidate (no failback);
//   - otherwise the candidate with the fewest allocations wins (an empty node
//     first), ties broken by name, a Recovering node only when no other
//     candidate exists; none → "" (NoEligibleNode).
//
// EgressServices are visited sorted by namespace/name: first every kept
// host is counted, then the others are placed in that order, so the result
// is deterministic and the same input always gives the same hosts.
func SelectHosts(in SelectInput) SelectResult {
	s := &selector{in: in, res: SelectResult{Selections: map[string]Selection{}, Allocations: map[string]int{}}}
	for n, c := range in.Allocations {
		if c > 0 {
			s.res.Allocations[n] = c
		}
	}
	for name, n := range in.Nodes {
		if n != nil {
			s.nodes = append(s.nodes, name)
		}
	}
	slices.Sort(s.nodes)
	var ess []*egressv1.EgressService
	for _, es := range in.EgressServices {
		if es != nil {
			ess = append(ess, es)
		}
	}
	var pending []*placement
	for _, es := range translate.SortedEgressServices(ess) {
		key := translate.EgressServiceKey(es)
		cur := es.Status.Host
		if in.KeepAssigned && cur != "" {
			s.res.Selections[key] = Selection{Host: cur, Current: cur}
			if cur != egressv1.HostAll {
				s.res.Allocations[cur]++
			}
			continue
		}
		p := s.evaluate(es)
		if p.keep {
			s.res.Allocations[cur]++
		}
		if p.needsNode && !p.keep {
			pending = append(pending, p)
			continue
		}
		s.res.Selections[key] = Selection{Host: p.host, Current: cur, Why: p.why, Cause: p.cause, Damped: p.damped}
	}
	for _, p := range pending {
		s.place(p)
	}
	return s.res
}

type selector struct {
	in    SelectInput
	res   SelectResult
	nodes []string         // sorted
	pools map[string]*pool // by the selector's canonical string
}

// placement is one LoadBalancerIP EgressService being decided.
type placement struct {
	es         *egressv1.EgressService
	key        string
	host       string // decided host when needsNode is false
	needsNode  bool
	keep       bool // the current host stays
	damped     bool // kept by SelectInput.Damped
	why        string
	cause      string
	sel        labels.Selector
	pool       *pool           // the nodes sel admits
	local      map[string]bool // nodes with an endpoint, for externalTrafficPolicy Local
	candidates []string        // with local: the pool's candidates among them, sorted
	excluded   exclusions      // with local: the nodes that are not candidates
}

// exclusions counts the nodes that are not candidates, by first failing test.
type exclusions struct{ notReady, noMatch, noLocal, unreachable int }

func (s *selector) problem(key string, r translate.Reason, format string, args ...any) {
	s.res.Problems.Add(key, r, format, args...)
}

func (s *selector) reachable(node string) bool {
	r, ok := s.in.Reachable[node]
	return !ok || r
}

// evaluate resolves one EgressService: either its host is decided at once
// ("" or ALL), or it needs a node and its candidates are listed.
func (s *selector) evaluate(es *egressv1.EgressService) *placement {
	p := &placement{es: es, key: translate.EgressServiceKey(es)}
	cur := es.Status.Host
	if blocked := s.resolve(p); blocked != "" && cur != "" && cur != egressv1.HostAll {
		p.why, p.cause = blocked, CauseService
	}
	if !p.needsNode || cur == "" || cur == egressv1.HostAll {
		return p
	}
	n, ok := s.in.Nodes[cur]
	switch why := s.exclude(cur, p.sel, p.local); {
	case !ok || n == nil:
		p.why, p.cause = fmt.Sprintf("node %s no longer exists", cur), CauseNodeGone
	case why == "":
		p.keep, p.host = true, cur
	case why == whyNoMatch && s.in.Damped[p.key] && s.exclude(cur, labels.Everything(), p.local) == "":
		p.keep, p.host, p.damped = true, cur, true
		s.problem(p.key, translate.ReasonHostMoveDamped, "host %s no longer matches spec.nodeSelector but stays for now: the selector changed again soon after it moved the host (--selector-move-damping)", cur)
	default:
		p.why, p.cause = fmt.Sprintf("node %s %s", cur, why), causeOf(why)
		if why == whyUnreachable {
			s.problem(p.key, ReasonHostUnreachable, "host %s does not answer health checks", cur)
		}
	}
	return p
}

// resolve checks the Service and the selector. It sets p.host for the
// EgressServices whose host is decided without looking at nodes, or
// p.needsNode and the candidates; it returns the message of the problem
// that leaves the EgressService without a host, if any.
func (s *selector) resolve(p *placement) string {
	svc := s.in.Services[p.key]
	fail := func(r translate.Reason, format string, args ...any) string {
		s.problem(p.key, r, format, args...)
		return fmt.Sprintf(format, args...)
	}
	if svc == nil {
		return fail(translate.ReasonServiceNotFound, "Service %s not found", p.key)
	}
	eps := s.in.EndpointSlices[p.key]
	if mirrored := translate.MirroredSlices(svc, eps); len(mirrored) > 0 {
		s.problem(p.key, translate.ReasonEndpointsMirrored,
			"EndpointSlice %s of Service %s is mirrored from an Endpoints object, whose addresses are not checked to be this namespace's pods: its endpoints are not used (give the Service a selector)",
			strings.Join(mirrored, ", "), p.key)
	}
	if p.es.Spec.SourceIPBy == egressv1.Network {
		p.host = egressv1.HostAll
		if !translate.IsLoadBalancer(svc) {
			s.problem(p.key, translate.ReasonServiceNotLoadBalancer, "Service %s is of type %s, not LoadBalancer: nothing is rerouted for it", p.key, svc.Spec.Type)
		} else if len(translate.ServiceEndpoints(svc, eps, s.in.ClusterSubnets)) == 0 {
			s.problem(p.key, translate.ReasonNoEndpoints, "Service %s has no cluster-networked endpoints", p.key)
		}
		return "sourceIPBy is Network"
	}
	if !translate.IsLoadBalancer(svc) {
		return fail(translate.ReasonServiceNotLoadBalancer, "Service %s is of type %s, not LoadBalancer", p.key, svc.Spec.Type)
	}
	label := NodeLabel(p.es.Namespace, p.es.Name)
	if holder := labelHolder(s.in.LabelClaims[label]); holder != "" && holder != p.key {
		return fail(ReasonNodeLabelCollision, "its host label %s is also that of EgressService %s, which holds it (created first): this one is not hosted until one of them is renamed", label, holder)
	}
	ingress, multiple := translate.IngressIPs(svc)
	for _, f := range multiple {
		s.problem(p.key, translate.ReasonMultipleIngressIPs, "Service %s has more than one %s ingress IP; the first, %s, is used", p.key, f.Name(), ingress[f])
	}
	if len(ingress) == 0 {
		return fail(translate.ReasonNoIngressIP, "Service %s has no load-balancer ingress IP", p.key)
	}
	for _, f := range ipfamily.All {
		ip, ok := ingress[f]
		if !ok {
			continue
		}
		if why := s.in.Networks.Refusal(ip, s.in.NodeIPs); why != "" {
			return fail(translate.ReasonInvalidIngressIP, "load-balancer ingress IP %s %s: pods never leave with it, so no host is chosen", ip, why)
		}
		if others := translate.OtherNamespaces(p.key, s.in.IngressClaims[ip]); len(others) > 0 {
			return fail(translate.ReasonIngressIPShared, "load-balancer ingress IP %s is also the ingress IP of EgressService %s in another namespace: neither is hosted until only one namespace uses it",
				ip, strings.Join(others, ", "))
		}
	}
	if len(translate.ServiceEndpoints(svc, eps, s.in.ClusterSubnets)) == 0 {
		return fail(translate.ReasonNoEndpoints, "Service %s has no cluster-networked endpoints", p.key)
	}
	sel, err := metav1.LabelSelectorAsSelector(&p.es.Spec.NodeSelector)
	if err != nil {
		return fail(translate.ReasonInvalidNodeSelector, "spec.nodeSelector is invalid: %v", err)
	}
	p.needsNode, p.sel, p.pool = true, sel, s.poolOf(sel)
	if translate.ETPLocal(svc) {
		p.local = endpointNodes(svc, eps)
		p.candidates, p.excluded = p.pool.local(p.local, s.reachable)
	}
	return ""
}

// Why a node is not a candidate, in the order they are tested.
const (
	whyNotReady    = "is not Ready"
	whyNoMatch     = "does not match spec.nodeSelector"
	whyNoLocal     = "has no endpoint of the Service (externalTrafficPolicy Local)"
	whyUnreachable = "is unreachable (health check)"
)

// causeOf names a why* as a Cause*.
func causeOf(why string) string {
	switch why {
	case whyNotReady:
		return CauseNotReady
	case whyNoMatch:
		return CauseSelector
	case whyNoLocal:
		return CauseNoLocalEndpoint
	case whyUnreachable:
		return CauseUnreachable
	}
	return ""
}

func (e exclusions) String() string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{{e.notReady, "not Ready"}, {e.noMatch, "not matching spec.nodeSelector"},
		{e.noLocal, "without an endpoint of the Service (externalTrafficPolicy Local)"}, {e.unreachable, "unreachable"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(parts, ", ")
}

// exclude returns why the node cannot host, or "" for a candidate.
func (s *selector) exclude(name string, sel labels.Selector, local map[string]bool) string {
	n := s.in.Nodes[name]
	switch {
	case n == nil || !n.Ready:
		return whyNotReady
	case !sel.Matches(labels.Set(n.Labels)):
		return whyNoMatch
	case local != nil && !local[name]:
		return whyNoLocal
	case !s.reachable(name):
		return whyUnreachable
	}
	return ""
}

// place gives a pending EgressService the candidate with the fewest
// allocations (a Recovering node last, ties: the first by name) and counts
// it: from its pool's heap, or for externalTrafficPolicy Local by walking
// its few endpoint nodes.
func (s *selector) place(p *placement) {
	cur := p.es.Status.Host
	best, excluded := "", p.excluded
	if p.local == nil {
		best, excluded = s.least(p.pool), p.pool.excluded
	}
	for _, c := range p.candidates {
		switch {
		case best == "":
			best = c
		case s.in.Recovering[best] != s.in.Recovering[c]:
			if s.in.Recovering[best] {
				best = c
			}
		case s.res.Allocations[c] < s.res.Allocations[best]:
			best = c
		}
	}
	if full := s.in.MaxPerNode; best != "" && full > 0 && s.res.Allocations[best] >= full {
		// best has the fewest allocations of the candidates (a Recovering
		// node is chosen last, so one with room behind a full steady node
		// is not looked at: a node of last resort stays one).
		s.problem(p.key, translate.ReasonNoEligibleNode, "no node can host it: every candidate already hosts %d EgressServices, the cap (--max-services-per-node: each is a label on its Node)", full)
		s.res.Selections[p.key] = Selection{Current: cur, Why: p.why, Cause: p.cause}
		return
	}
	if best == "" {
		msg := "no node can host it"
		switch ex := excluded.String(); {
		case len(s.nodes) == 0:
			msg += ": there are no nodes"
		case ex != "":
			msg += fmt.Sprintf(": of %d nodes, %s", len(s.nodes), ex)
		}
		s.problem(p.key, translate.ReasonNoEligibleNode, "%s", msg)
	} else {
		s.res.Allocations[best]++
	}
	s.res.Selections[p.key] = Selection{Host: best, Current: cur, Why: p.why, Cause: p.cause}
}

// endpointNodes are the nodeNames of every endpoint of the Service's slices.
func endpointNodes(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) map[string]bool {
	out := map[string]bool{}
	for _, s := range eps {
		if s == nil || s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		for _, e := range s.Endpoints {
			if e.NodeName != nil && *e.NodeName != "" {
				out[*e.NodeName] = true
			}
		}
	}
	return out
}

// NodeLabel is the key of the label the host of EgressService
// namespace/name carries (value ""), for MetalLB's node selectors:
// "egress-service.k8s.ovn.org/<namespace>-<name>", as ovn-kubernetes names
// it. When "<namespace>-<name>" is longer than 63 characters (or not a valid
// label name), which ovn-kubernetes does not handle, it becomes its first 52
// characters, "-", and the first 10 hex digits of SHA-256 of
// "<namespace>/<name>": still unique in practice and always a valid key.
func NodeLabel(namespace, name string) string {
	n := namespace + "-" + name
	if len(n) <= maxLabelName && len(validation.IsQualifiedName(NodeLabelPrefix+n)) == 0 {
		return NodeLabelPrefix + n
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	hash := hex.EncodeToString(sum[:])[:labelHashLen]
	keep := strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || isAlnum(byte(r))) {
			return r
		}
		return '-'
	}, n)
	keep = strings.TrimLeftFunc(keep, func(r rune) bool { return r >= 0x80 || !isAlnum(byte(r)) })
	if len(keep) > labelKeep {
		keep = keep[:labelKeep]
	}
	if keep == "" {
		return NodeLabelPrefix + hash
	}
	return NodeLabelPrefix + keep + "-" + hash
}

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// IsNodeLabel reports whether a label key is one host selection owns.
func IsNodeLabel(key string) bool { return strings.HasPrefix(key, NodeLabelPrefix) }

// HostedLabels returns the egress-service labels node must carry: one per
// LoadBalancerIP EgressService whose status.host is node, sorted. The label
// follows status.host as written, never a decision not yet written.
func HostedLabels(node string, ess []*egressv1.EgressService) []string {
	var out []string
	for _, es := range ess {
		if es != nil && node != "" && es.Status.Host == node && es.Spec.SourceIPBy != egressv1.Network {
			out = append(out, NodeLabel(es.Namespace, es.Name))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// LabelPatch returns the labels of a JSON merge patch that turns a node's
// egress-service labels into exactly want: missing ones (or ones with a
// value) are set to "", every other label with NodeLabelPrefix — stray ones
// included — is removed (nil). Labels without the prefix are never touched.
// It returns nil when nothing is to change.
func LabelPatch(current map[string]string, want []string) map[string]*string {
	patch := map[string]*string{}
	wanted := map[string]bool{}
	for _, k := range want {
		wanted[k] = true
		if v, ok := current[k]; !ok || v != "" {
			empty := ""
			patch[k] = &empty
		}
	}
	for k := range current {
		if IsNodeLabel(k) && !wanted[k] {
			patch[k] = nil
		}
	}
	if len(patch) == 0 {
		return nil
	}
	return patch
}

// Apply returns copies of ess with status.host set to the selected hosts
// (EgressServices without a selection are copied unchanged).
func (r SelectResult) Apply(ess []*egressv1.EgressService) []*egressv1.EgressService {
	out := make([]*egressv1.EgressService, 0, len(ess))
	for _, es := range ess {
		if es == nil {
			continue
		}
		c := es.DeepCopy()
		if sel, ok := r.Selections[translate.EgressServiceKey(es)]; ok {
			c.Status.Host = sel.Host
		}
		out = append(out, c)
	}
	return out
}

// NodeReadyOffline is the readiness offline selection uses: a Node whose
// manifest has no Ready condition counts as Ready; otherwise the condition
// decides.
func NodeReadyOffline(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true
}
