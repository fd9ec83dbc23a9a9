package hosts

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// selectIn turns a table-test world into a selection input.
func (w *world) selectIn() SelectInput {
	return SelectInput{ClusterSubnets: w.In.Config.ClusterSubnets, EgressServices: w.In.EgressServices,
		Services: w.In.Services, EndpointSlices: w.In.EndpointSlices, Nodes: w.In.Nodes,
		Networks: translate.IngressNetworks{ClusterSubnets: w.In.Config.ClusterSubnets, JoinSubnets: w.In.Config.JoinSubnets, ServiceCIDRs: w.In.Config.ServiceCIDRs}}
}

// lb adds a LoadBalancer Service with one ingress IP and an endpoint on
// node1, and its EgressService with the given host.
func (w *world) lb(key, host string, mutate ...func(*egressv1.EgressService)) *egressv1.EgressService {
	w.Svc(key, "172.18.0.100")
	w.EPs(key, "10.244.1.5@node1")
	return w.ES(key, host, mutate...)
}

func selectorOf(ml map[string]string) func(*egressv1.EgressService) {
	return func(e *egressv1.EgressService) { e.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: ml} }
}

func network(e *egressv1.EgressService) { e.Spec.SourceIPBy = egressv1.Network }

func etpLocal(w *world, key string) {
	w.In.Services[key].Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
}

func TestSelectHosts(t *testing.T) {
	tests := []struct {
		name  string
		nodes int
		setup func(w *world, in *SelectInput)
		// want: key → host; reasons: key → problem reasons (sorted); why: key → substring of Why
		want    map[string]string
		reasons map[string][]translate.Reason
		why     map[string]string
		cause   map[string]string // Selection.Cause, when set
	}{
		{name: "empty selector: every node, the first by name", nodes: 3,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "") },
			want:  map[string]string{"ns/a": "node1"}},
		{name: "selector picks the matching node", nodes: 3,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "", selectorOf(map[string]string{"kubernetes.io/hostname": "node2"}))
			},
			want: map[string]string{"ns/a": "node2"}},
		{name: "explicit LoadBalancerIP behaves as empty sourceIPBy", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "", func(e *egressv1.EgressService) { e.Spec.SourceIPBy = egressv1.LoadBalancerIP })
			},
			want: map[string]string{"ns/a": "node1"}},
		{name: "Network is ALL", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "", network) },
			want:  map[string]string{"ns/a": "ALL"}},
		{name: "switching to Network leaves the node", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "node2", network) },
			want:  map[string]string{"ns/a": "ALL"}, why: map[string]string{"ns/a": "sourceIPBy is Network"}},
		{name: "Network is ALL even for a non-LoadBalancer Service without endpoints, as upstream", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.Svc("ns/a").Spec.Type = corev1.ServiceTypeClusterIP
				w.ES("ns/a", "", network)
			},
			want: map[string]string{"ns/a": "ALL"}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonServiceNotLoadBalancer}}},
		{name: "Network without endpoints is ALL and says so", nodes: 1,
			setup: func(w *world, _ *SelectInput) { w.Svc("ns/a", "172.18.0.100"); w.ES("ns/a", "", network) },
			want:  map[string]string{"ns/a": "ALL"}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoEndpoints}}},
		{name: "Network without a Service has no host", nodes: 1,
			setup: func(w *world, _ *SelectInput) { w.ES("ns/a", "ALL") },
			want:  map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonServiceNotFound}}},
		{name: "no Service clears the host", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.ES("ns/a", "node1") },
			want:  map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonServiceNotFound}},
			why: map[string]string{"ns/a": "not found"}},
		{name: "Service not LoadBalancer", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "node1")
				w.In.Services["ns/a"].Spec.Type = corev1.ServiceTypeNodePort
			},
			want: map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonServiceNotLoadBalancer}}},
		{name: "no ingress IP", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.Svc("ns/a"); w.EPs("ns/a", "10.244.1.5@node1"); w.ES("ns/a", "") },
			want:  map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoIngressIP}}},
		{name: "two ingress IPs of a family: assigned, and reported", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.Svc("ns/a", "172.18.0.100", "172.18.0.101")
				w.EPs("ns/a", "10.244.1.5@node1")
				w.ES("ns/a", "")
			},
			want: map[string]string{"ns/a": "node1"}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonMultipleIngressIPs}}},
		{name: "no endpoints", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.Svc("ns/a", "172.18.0.100"); w.ES("ns/a", "node2") },
			want:  map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoEndpoints}}},
		{name: "only host-networked endpoints", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.Svc("ns/a", "172.18.0.100")
				w.EPs("ns/a", "172.18.0.5@node1")
				w.ES("ns/a", "")
			},
			want: map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoEndpoints}}},
		{name: "invalid selector: no host, no panic", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "node1", selectorOf(map[string]string{"a:b": "c&"})) },
			want:  map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonInvalidNodeSelector}},
			why: map[string]string{"ns/a": "nodeSelector is invalid"}},
		{name: "invalid selector operator", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "", func(e *egressv1.EgressService) {
					e.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Near"}}
				})
			},
			want: map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonInvalidNodeSelector}}},
		{name: "sticky: the current host stays although another node is emptier", nodes: 3,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "node3"); w.lb("ns/b", "node3") },
			want:  map[string]string{"ns/a": "node3", "ns/b": "node3"}},
		{name: "selector change moves the host", nodes: 3,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "node1", selectorOf(map[string]string{"kubernetes.io/hostname": "node2"}))
			},
			want: map[string]string{"ns/a": "node2"}, why: map[string]string{"ns/a": "node1 does not match spec.nodeSelector"}},
		{name: "a second service goes to the emptier node", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "node1"); w.lb("ns/b", "") },
			want:  map[string]string{"ns/a": "node1", "ns/b": "node2"}},
		{name: "kept hosts are counted before new ones are placed", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", ""); w.lb("ns/z", "node1") },
			want:  map[string]string{"ns/a": "node2", "ns/z": "node1"}},
		{name: "fewest allocations, ties by name, counting the others", nodes: 3,
			setup: func(w *world, in *SelectInput) {
				w.lb("ns/a", "")
				in.Allocations = map[string]int{"node1": 2, "node2": 1, "node3": 1}
			},
			want: map[string]string{"ns/a": "node2"}},
		{name: "new services spread in namespace/name order", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/c", ""); w.lb("ns/b", ""); w.lb("ns/a", "") },
			want:  map[string]string{"ns/a": "node1", "ns/b": "node2", "ns/c": "node1"}},
		{name: "Network services are no allocation", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "", network); w.lb("ns/b", "") },
			want:  map[string]string{"ns/a": "ALL", "ns/b": "node1"}},
		{name: "host NotReady: moves", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "node1"); w.In.Nodes["node1"].Ready = false },
			want:  map[string]string{"ns/a": "node2"}, why: map[string]string{"ns/a": "node1 is not Ready"}, cause: map[string]string{"ns/a": CauseNotReady}},
		{name: "host deleted: moves", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "node9") },
			want:  map[string]string{"ns/a": "node1"}, why: map[string]string{"ns/a": "node9 no longer exists"}, cause: map[string]string{"ns/a": CauseNodeGone}},
		{name: "host unreachable: drained", nodes: 2,
			setup: func(w *world, in *SelectInput) { w.lb("ns/a", "node1"); in.Reachable = map[string]bool{"node1": false} },
			want:  map[string]string{"ns/a": "node2"}, reasons: map[string][]translate.Reason{"ns/a": {ReasonHostUnreachable}},
			why: map[string]string{"ns/a": "node1 is unreachable"}, cause: map[string]string{"ns/a": CauseUnreachable}},
		{name: "every node unreachable: no host", nodes: 2,
			setup: func(w *world, in *SelectInput) {
				w.lb("ns/a", "node1")
				in.Reachable = map[string]bool{"node1": false, "node2": false}
			},
			want: map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {ReasonHostUnreachable, translate.ReasonNoEligibleNode}}},
		{name: "reachable again: no failback", nodes: 2,
			setup: func(w *world, in *SelectInput) { w.lb("ns/a", "node2"); in.Reachable = map[string]bool{"node1": true} },
			want:  map[string]string{"ns/a": "node2"}},
		{name: "damping: a recovering node is passed over while a steady one can host", nodes: 3,
			setup: func(w *world, in *SelectInput) {
				w.lb("ns/a", "node3")
				w.lb("ns/b", "node2")
				in.Reachable = map[string]bool{"node3": false}
				in.Recovering = map[string]bool{"node1": true} // empty, first by name, but flapping
			},
			want: map[string]string{"ns/a": "node2", "ns/b": "node2"}, reasons: map[string][]translate.Reason{"ns/a": {ReasonHostUnreachable}},
			cause: map[string]string{"ns/a": CauseUnreachable}},
		{name: "damping: a recovering node hosts when it is the only candidate", nodes: 2,
			setup: func(w *world, in *SelectInput) {
				w.lb("ns/a", "node2")
				in.Reachable = map[string]bool{"node2": false}
				in.Recovering = map[string]bool{"node1": true}
			},
			want: map[string]string{"ns/a": "node1"}, reasons: map[string][]translate.Reason{"ns/a": {ReasonHostUnreachable}}},
		{name: "damping: a recovering host keeps what it hosts", nodes: 2,
			setup: func(w *world, in *SelectInput) { w.lb("ns/a", "node1"); in.Recovering = map[string]bool{"node1": true} },
			want:  map[string]string{"ns/a": "node1"}},
		{name: "no node matches: no host", nodes: 2,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "", selectorOf(map[string]string{"egress": "yes"})) },
			want:  map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoEligibleNode}}},
		{name: "a node relabelled to match gets the service", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "", selectorOf(map[string]string{"egress": "yes"}))
				w.In.Nodes["node2"].Labels = map[string]string{"egress": "yes"}
			},
			want: map[string]string{"ns/a": "node2"}},
		{name: "host relabelled away: moves", nodes: 3,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "node1", selectorOf(map[string]string{"egress": "yes"}))
				w.In.Nodes["node3"].Labels = map[string]string{"egress": "yes"}
			},
			want: map[string]string{"ns/a": "node3"}, why: map[string]string{"ns/a": "does not match"}, cause: map[string]string{"ns/a": CauseSelector}},
		{name: "matchExpressions", nodes: 3,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "", func(e *egressv1.EgressService) {
					e.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{
						{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"node1", "node2"}}}
				})
			},
			want: map[string]string{"ns/a": "node3"}},
		{name: "ETP Local without an endpoint on the selected node", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "", selectorOf(map[string]string{"kubernetes.io/hostname": "node2"}))
				etpLocal(w, "ns/a")
			},
			want: map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoEligibleNode}}},
		{name: "ETP Local with an endpoint on the selected node", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "", selectorOf(map[string]string{"kubernetes.io/hostname": "node1"}))
				etpLocal(w, "ns/a")
			},
			want: map[string]string{"ns/a": "node1"}},
		{name: "ETP Local: endpoint removed from the host, one without nodeName added", nodes: 2,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "node1", selectorOf(map[string]string{"kubernetes.io/hostname": "node1"}))
				w.EPs("ns/a", "10.244.2.5@node2", "10.244.2.6")
				etpLocal(w, "ns/a")
			},
			want: map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoEligibleNode}},
			why: map[string]string{"ns/a": "no endpoint of the Service"}, cause: map[string]string{"ns/a": CauseNoLocalEndpoint}},
		{name: "ETP Local chooses among the endpoints' nodes", nodes: 3,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "")
				w.EPs("ns/a", "10.244.2.5@node2", "10.244.3.5@node3")
				etpLocal(w, "ns/a")
			},
			want: map[string]string{"ns/a": "node2"}},
		{name: "ETP Local counts a host-networked endpoint's node, as upstream", nodes: 3,
			setup: func(w *world, _ *SelectInput) {
				w.lb("ns/a", "")
				w.EPs("ns/a", "10.244.2.5@node2", "172.18.0.4@node3")
				etpLocal(w, "ns/a")
				w.In.Nodes["node2"].Ready = false
			},
			want: map[string]string{"ns/a": "node3"}},
		{name: "no nodes at all", nodes: 0,
			setup: func(w *world, _ *SelectInput) { w.lb("ns/a", "") },
			want:  map[string]string{"ns/a": ""}, reasons: map[string][]translate.Reason{"ns/a": {translate.ReasonNoEligibleNode}}},
		{name: "keep assigned (offline): given hosts stay, empty ones are filled", nodes: 2,
			setup: func(w *world, in *SelectInput) {
				in.KeepAssigned = true
				w.lb("ns/a", "node9")
				w.lb("ns/b", "node1")
				w.lb("ns/c", "")
			},
			want: map[string]string{"ns/a": "node9", "ns/b": "node1", "ns/c": "node2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(tc.nodes)
			in := w.selectIn()
			tc.setup(w, &in)
			in.EgressServices, in.Services, in.EndpointSlices = w.In.EgressServices, w.In.Services, w.In.EndpointSlices
			res := SelectHosts(in)
			got := map[string]string{}
			for k, s := range res.Selections {
				got[k] = s.Host
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("hosts: got %v; want %v", got, tc.want)
			}
			for _, es := range w.In.EgressServices {
				key := translate.EgressServiceKey(es)
				var rs []translate.Reason
				for _, p := range res.Problems.For(key) {
					rs = append(rs, p.Reason)
				}
				slices.Sort(rs)
				if !slices.Equal(rs, tc.reasons[key]) {
					t.Errorf("%s reasons: got %v; want %v (%v)", key, rs, tc.reasons[key], res.Problems.For(key))
				}
				sel := res.Selections[key]
				if w := tc.why[key]; !strings.Contains(sel.Why, w) {
					t.Errorf("%s why: got %q; want it to contain %q", key, sel.Why, w)
				}
				if c, ok := tc.cause[key]; (ok && sel.Cause != c) || (sel.Why == "") != (sel.Cause == "") {
					t.Errorf("%s cause: got %q (why %q); want %q", key, sel.Cause, sel.Why, c)
				}
			}
			again := SelectHosts(in)
			if !maps.Equal(again.Selections, res.Selections) {
				t.Errorf("not deterministic: %v then %v", res.Selections, again.Selections)
			}
		})
	}
}

// TestSelectHostsRefusesIngressIPs: a load-balancer ingress IP no pod may
// leave with (a node's own address, one inside the cluster, join or
// service networks, loopback, link-local, multicast, unspecified), or one
// that EgressServices of two namespaces share, gets no host (a host it had
// is given up) and a problem naming why; two services of one namespace may
// share an IP (MetalLB's allow-shared-ip).
func TestSelectHostsRefusesIngressIPs(t *testing.T) {
	for _, tc := range []struct {
		name, ingress, host string
		claims              []string
		want                string
		reason              translate.Reason
		message             string
	}{
		{name: "a node's own address", ingress: "172.18.0.3", want: "", reason: translate.ReasonInvalidIngressIP, message: "172.18.0.3 is node node2's own address"},
		{name: "inside the cluster subnet", ingress: "10.244.1.1", want: "", reason: translate.ReasonInvalidIngressIP, message: "is inside the cluster subnet 10.244.0.0/16"},
		{name: "inside the service CIDR", ingress: "10.96.0.1", want: "", reason: translate.ReasonInvalidIngressIP, message: "is inside the service CIDR 10.96.0.0/16"},
		{name: "inside the join subnet", ingress: "100.64.0.5", want: "", reason: translate.ReasonInvalidIngressIP, message: "is inside the join subnet 100.64.0.0/16"},
		{name: "loopback", ingress: "127.0.0.1", want: "", reason: translate.ReasonInvalidIngressIP, message: "is a loopback address"},
		{name: "link-local", ingress: "169.254.1.1", want: "", reason: translate.ReasonInvalidIngressIP, message: "is link-local"},
		{name: "IPv6 link-local", ingress: "fe80::1", want: "", reason: translate.ReasonInvalidIngressIP, message: "is link-local"},
		{name: "multicast", ingress: "224.0.0.1", want: "", reason: translate.ReasonInvalidIngressIP, message: "is multicast"},
		{name: "unspecified", ingress: "0.0.0.0", want: "", reason: translate.ReasonInvalidIngressIP, message: "is unspecified"},
		{name: "broadcast", ingress: "255.255.255.255", want: "", reason: translate.ReasonInvalidIngressIP, message: "is the broadcast address"},
		{name: "a host it had is given up", ingress: "172.18.0.2", host: "node2", want: "", reason: translate.ReasonInvalidIngressIP, message: "node node1's own address"},
		{name: "shared with another namespace", ingress: "172.18.0.100", claims: []string{"ns/a", "other/web"}, want: "",
			reason: translate.ReasonIngressIPShared, message: "172.18.0.100 is also the ingress IP of EgressService other/web in another namespace"},
		{name: "shared within its namespace", ingress: "172.18.0.100", claims: []string{"ns/a", "ns/b"}, want: "node1"},
		{name: "a good address", ingress: "172.18.0.100", claims: []string{"ns/a"}, want: "node1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(3)
			w.Svc("ns/a", tc.ingress)
			w.EPs("ns/a", "10.244.1.5@node1")
			w.ES("ns/a", tc.host)
			in := w.selectIn()
			in.NodeIPs = map[netip.Addr]string{}
			for _, n := range w.In.Nodes {
				for _, ip := range n.HostIPs {
					in.NodeIPs[ip] = n.Name
				}
			}
			ip := netip.MustParseAddr(tc.ingress)
			in.IngressClaims = map[netip.Addr][]string{ip: tc.claims}
			res := SelectHosts(in)
			sel := res.Selections["ns/a"]
			if sel.Host != tc.want {
				t.Errorf("host %q; want %q (%v)", sel.Host, tc.want, res.Problems)
			}
			ps := res.Problems.For("ns/a")
			if tc.reason == "" {
				if len(ps) != 0 {
					t.Errorf("problems %v; want none", ps)
				}
				return
			}
			if len(ps) != 1 || ps[0].Reason != tc.reason || !strings.Contains(ps[0].Message, tc.message) {
				t.Errorf("problems %v; want one %s containing %q", ps, tc.reason, tc.message)
			}
			if tc.host != "" && !strings.Contains(sel.Why, tc.message) {
				t.Errorf("why %q; want it to name the refusal", sel.Why)
			}
		})
	}
}

func TestSelectHostsAllocations(t *testing.T) {
	w := newWorld(3)
	w.lb("ns/a", "node2")
	w.lb("ns/b", "")
	w.lb("ns/c", "", network)
	in := w.selectIn()
	in.Allocations = map[string]int{"node1": 1, "node3": 0}
	res := SelectHosts(in)
	want := map[string]int{"node1": 1, "node2": 1, "node3": 1}
	if !maps.Equal(res.Allocations, want) {
		t.Fatalf("allocations: got %v; want %v", res.Allocations, want)
	}
	if s := res.Selections["ns/b"]; !s.Changed() || s.Host != "node3" {
		t.Fatalf("ns/b: got %+v; want a change to node3", s)
	}
	if res.Selections["ns/a"].Changed() {
		t.Fatalf("ns/a changed: %+v", res.Selections["ns/a"])
	}
}

func TestSelectHostsNoEligibleMessage(t *testing.T) {
	w := newWorld(4)
	w.lb("ns/a", "", selectorOf(map[string]string{"egress": "yes"}))
	w.In.Nodes["node1"].Ready = false
	for _, n := range []string{"node2", "node3"} {
		w.In.Nodes[n].Labels = map[string]string{"egress": "yes"}
	}
	in := w.selectIn()
	in.Reachable = map[string]bool{"node2": false, "node3": false}
	res := SelectHosts(in)
	ps := res.Problems.For("ns/a")
	want := "no node can host it: of 4 nodes, 1 not Ready, 1 not matching spec.nodeSelector, 2 unreachable"
	if len(ps) != 1 || ps[0].Message != want {
		t.Fatalf("got %v; want one NoEligibleNode %q", ps, want)
	}
}

func TestSelectHostsIgnoresNil(t *testing.T) {
	w := newWorld(1)
	w.lb("ns/a", "")
	in := w.selectIn()
	in.EgressServices = append(in.EgressServices, nil)
	in.Nodes["ghost"] = nil
	if got := SelectHosts(in).Selections["ns/a"].Host; got != "node1" {
		t.Fatalf("got %q; want node1", got)
	}
}

func TestNodeLabel(t *testing.T) {
	long := strings.Repeat("n", 63)
	tests := []struct{ ns, name, want string }{
		{"testns", "svc1", "egress-service.k8s.ovn.org/testns-svc1"},
		{strings.Repeat("a", 31), strings.Repeat("b", 31), "egress-service.k8s.ovn.org/" + strings.Repeat("a", 31) + "-" + strings.Repeat("b", 31)},
		{long, "svc", ""},
		{long, long, ""},
		{"ns", "Not_A-DNS.name", "egress-service.k8s.ovn.org/ns-Not_A-DNS.name"},
		{"-ns", "é", ""},
		{"", "", ""},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		got := NodeLabel(tc.ns, tc.name)
		if tc.want != "" && got != tc.want {
			t.Errorf("NodeLabel(%q, %q) = %q; want %q", tc.ns, tc.name, got, tc.want)
		}
		if errs := validation.IsQualifiedName(got); len(errs) != 0 {
			t.Errorf("NodeLabel(%q, %q) = %q is not a valid label key: %v", tc.ns, tc.name, got, errs)
		}
		if seen[got] {
			t.Errorf("NodeLabel(%q, %q) = %q collides", tc.ns, tc.name, got)
		}
		seen[got] = true
		if got != NodeLabel(tc.ns, tc.name) {
			t.Errorf("NodeLabel(%q, %q) is not deterministic", tc.ns, tc.name)
		}
	}
	a, b := NodeLabel(long, long+"x"), NodeLabel(long, long+"y")
	if a == b || !strings.HasPrefix(a, NodeLabelPrefix+strings.Repeat("n", labelKeep)+"-") || len(a) != len(NodeLabelPrefix)+63 {
		t.Errorf("long names: %q and %q", a, b)
	}
}

func TestLabelPatch(t *testing.T) {
	e := ""
	tests := []struct {
		name    string
		current map[string]string
		want    []string
		patch   map[string]*string
	}{
		{name: "nothing to do", current: map[string]string{"kubernetes.io/hostname": "node1", NodeLabelPrefix + "ns-a": ""},
			want: []string{NodeLabelPrefix + "ns-a"}},
		{name: "add", current: map[string]string{"kubernetes.io/hostname": "node1"}, want: []string{NodeLabelPrefix + "ns-a"},
			patch: map[string]*string{NodeLabelPrefix + "ns-a": &e}},
		{name: "stray labels removed, others untouched",
			current: map[string]string{"kubernetes.io/hostname": "node1", NodeLabelPrefix + "ghost-x": "", NodeLabelPrefix + "ns-a": "", "egress-service.k8s.ovn.org.evil/x": ""},
			want:    []string{NodeLabelPrefix + "ns-a"},
			patch:   map[string]*string{NodeLabelPrefix + "ghost-x": nil}},
		{name: "a value is reset to empty", current: map[string]string{NodeLabelPrefix + "ns-a": "manual"}, want: []string{NodeLabelPrefix + "ns-a"},
			patch: map[string]*string{NodeLabelPrefix + "ns-a": &e}},
		{name: "no allocations: every owned label goes", current: map[string]string{NodeLabelPrefix + "ns-a": "", NodeLabelPrefix + "ns-b": ""},
			patch: map[string]*string{NodeLabelPrefix + "ns-a": nil, NodeLabelPrefix + "ns-b": nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LabelPatch(tc.current, tc.want)
			if !maps.EqualFunc(got, tc.patch, func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }) {
				t.Fatalf("got %v; want %v", render(got), render(tc.patch))
			}
		})
	}
}

func render(p map[string]*string) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		if v == nil {
			out[k] = "<delete>"
		} else {
			out[k] = *v
		}
	}
	return out
}

// TestStartupRepair is ovn-kubernetes' cluster-manager repair cases (§4.2
// 1 and 2) expressed with the pure functions: valid hosts are adopted,
// a service without a Service loses its host, Network becomes ALL, and the
// labels of deleted and Network services are removed.
func TestStartupRepair(t *testing.T) {
	w := newWorld(2)
	w.lb("testns/svc1", "node1")
	w.lb("testns/svc2", "node2")
	w.ES("testns/gone", "node1")
	w.lb("testns/net", "node2", network)
	res := SelectHosts(w.selectIn())
	want := map[string]string{"testns/svc1": "node1", "testns/svc2": "node2", "testns/gone": "", "testns/net": "ALL"}
	for k, h := range want {
		if got := res.Selections[k].Host; got != h {
			t.Errorf("%s: got %q; want %q", k, got, h)
		}
	}
	after := res.Apply(w.In.EgressServices)
	labels := map[string]map[string]string{
		"node1": {NodeLabelPrefix + "testns-svc1": "", NodeLabelPrefix + "testns-deleted": "", "kubernetes.io/hostname": "node1"},
		"node2": {NodeLabelPrefix + "testns-svc2": "", NodeLabelPrefix + "testns-net": ""},
	}
	for node, cur := range labels {
		p := LabelPatch(cur, HostedLabels(node, after))
		for k, v := range p {
			if v != nil {
				cur[k] = *v
			} else {
				delete(cur, k)
			}
		}
	}
	if got := labels["node1"]; !maps.Equal(got, map[string]string{NodeLabelPrefix + "testns-svc1": "", "kubernetes.io/hostname": "node1"}) {
		t.Errorf("node1 labels: %v", got)
	}
	if got := labels["node2"]; !maps.Equal(got, map[string]string{NodeLabelPrefix + "testns-svc2": ""}) {
		t.Errorf("node2 labels: %v", got)
	}
	if w.In.EgressServices[2].Status.Host != "node1" {
		t.Error("Apply modified its input")
	}
}

func TestNodeReadyOffline(t *testing.T) {
	n := &corev1.Node{}
	if !NodeReadyOffline(n) {
		t.Error("a node without conditions is Ready offline")
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
	if NodeReadyOffline(n) {
		t.Error("Ready=Unknown is not Ready")
	}
}

// FuzzSelectHosts builds arbitrary clusters — labels, selectors with any
// strings and operators, readiness, reachability, endpoints on any node,
// hosts that exist or not — and checks that selection never panics, is
// deterministic, only picks Ready reachable nodes, keeps a valid current
// host, and yields valid label keys.
func FuzzSelectHosts(f *testing.F) {
	f.Add([]byte("seed"), "egress", "yes", "In", "node1", "ns", "svc")
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, "a:b", "c&", "Near", "ALL", strings.Repeat("n", 70), "x")
	f.Add([]byte{255, 0, 255, 0}, "", "", "Exists", "", "-", "é")
	f.Fuzz(func(t *testing.T, choices []byte, key, value, op, host, ns, name string) {
		pick := func(i int) int {
			if len(choices) == 0 {
				return 0
			}
			return int(choices[i%len(choices)])
		}
		w := newWorld(pick(0) % 5)
		in := w.selectIn()
		in.Reachable = map[string]bool{}
		for i, n := range []string{"node1", "node2", "node3", "node4"} {
			if node := w.In.Nodes[n]; node != nil {
				node.Ready = pick(1+i)%4 != 0
				if pick(2+i)%2 == 0 {
					node.Labels = map[string]string{key: value}
				}
				if pick(3+i)%5 == 0 {
					in.Reachable[n] = false
				}
			}
		}
		for i := 0; i < pick(5)%6; i++ {
			k := ns + "/" + name + string(rune('a'+i))
			h := host
			if pick(6+i)%3 == 0 {
				h = "node" + string(rune('0'+pick(7+i)%6))
			}
			e := w.ES(k, h)
			switch pick(8+i) % 4 {
			case 0:
				e.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
			case 1:
				e.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOperator(op), Values: []string{value}}}
			case 2:
				e.Spec.SourceIPBy = egressv1.SourceIPMode(op)
			}
			if pick(9+i)%5 != 0 {
				s := w.Svc(k, value, "172.18.0.9")
				if pick(10+i)%3 == 0 {
					s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				}
			}
			w.EPs(k, "10.244.1.5@"+h, "10.244.2.7@node"+string(rune('0'+pick(11+i)%5)), value+"@"+key)
		}
		in.EgressServices, in.Services, in.EndpointSlices = w.In.EgressServices, w.In.Services, w.In.EndpointSlices
		in.KeepAssigned = pick(12)%7 == 0
		a, b := SelectHosts(in), SelectHosts(in)
		if !maps.Equal(a.Selections, b.Selections) {
			t.Fatal("selection is not deterministic")
		}
		for _, es := range in.EgressServices {
			k := translate.EgressServiceKey(es)
			s, ok := a.Selections[k]
			if !ok {
				t.Fatalf("%s: no selection", k)
			}
			if errs := validation.IsQualifiedName(NodeLabel(es.Namespace, es.Name)); len(errs) != 0 {
				t.Fatalf("label of %s invalid: %v", k, errs)
			}
			if in.KeepAssigned && es.Status.Host != "" || s.Host == "" || s.Host == egressv1.HostAll {
				continue
			}
			n := in.Nodes[s.Host]
			if r, ok := in.Reachable[s.Host]; n == nil || !n.Ready || ok && !r {
				t.Fatalf("%s placed on a node that cannot host: %q", k, s.Host)
			}
		}
	})
}
