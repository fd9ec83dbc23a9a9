package translate

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestMirroredEndpointsNotUsed: an EndpointSlice mirrored from an Endpoints
// object (which a tenant with `edit` on an older cluster writes, any
// address in it) gives its EgressService no host, no NB rows and no SNAT,
// with an EndpointsMirrored problem; the pod address it names is another
// namespace's, whose own service keeps it.
func TestMirroredEndpointsNotUsed(t *testing.T) {
	mirror := func(ss []*discoveryv1.EndpointSlice) {
		for _, s := range ss {
			s.Labels[discoveryv1.LabelManagedBy] = MirroringManager
		}
	}
	w := newWorld(3)
	w.in.Config.AssumeAgentsReady = true
	w.svc("thief/web", "172.18.0.100")
	w.eps("thief/web", "10.244.1.5@node1") // the victim's pod
	mirror(w.in.EndpointSlices["thief/web"])
	w.es("thief/web", "node2")
	w.svc("victim/web", "172.18.0.101")
	w.eps("victim/web", "10.244.1.5@node1", "10.244.1.6@node1")
	w.es("victim/web", "node3")

	res := SelectHosts(w.selectIn())
	if h := res.Selections["thief/web"].Host; h != "" {
		t.Errorf("the mirrored service is hosted on %q", h)
	}
	var reasons []Reason
	for _, p := range res.Problems.For("thief/web") {
		reasons = append(reasons, p.Reason)
	}
	if !slices.Contains(reasons, ReasonEndpointsMirrored) || !slices.Contains(reasons, ReasonNoEndpoints) {
		t.Errorf("problems %v; want EndpointsMirrored and NoEndpoints", res.Problems.For("thief/web"))
	}
	if len(res.Problems.For("victim/web")) != 0 {
		t.Errorf("the victim's service has problems: %v", res.Problems.For("victim/web"))
	}

	// status.host written by someone else: still no rows for the thief.
	d := Translate(w.in)
	members := func(node string) []string {
		var out []string
		rows := d.Rows[NodeKey(node)]
		if rows == nil {
			return nil
		}
		for _, as := range rows.AddressSets {
			out = append(out, as.Addresses...)
		}
		return out
	}
	if m := members("node2"); len(m) != 0 {
		t.Errorf("the thief's host has members %v", m)
	}
	if m := members("node3"); !slices.Contains(m, "10.244.1.5") {
		t.Errorf("the victim's host lost its pod: %v", m)
	}
	for _, p := range d.Problems.For("victim/web") {
		if p.Reason == ReasonSharedEndpoint {
			t.Errorf("the victim's pod is shared with a mirrored slice: %v", p)
		}
	}

	// The agent on the thief's host SNATs nothing.
	in := planInput([]*egressv1.EgressService{planES("thief", "web", planNode, "", "")},
		[]*corev1.Service{planSvc("thief", "web", []string{"10.96.0.10"}, []string{"5.5.5.5"})},
		[]*discoveryv1.EndpointSlice{planSlice("thief", "web", npV4, "10.128.1.4@node1")}, nil)
	mirror(in.EndpointSlices)
	if got := NodePlan(in).Desired.SNAT; len(got) != 0 {
		t.Errorf("SNAT for a mirrored slice: %v", npStrs(got))
	}
}
