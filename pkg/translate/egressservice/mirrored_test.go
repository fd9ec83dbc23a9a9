package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestMirroredEndpointsNotUsed: an EndpointSlice mirrored from an Endpoints
// object (which a tenant with `edit` on an older cluster writes, any
// address in it) gives its EgressService no host, no NB rows and no SNAT,
// with an EndpointsMirrored problem; the pod address it names is another
// namespace's, whose own service keeps it.
func TestMirroredEndpointsNotUsed(t *testing.T) {
	mirror := func(ss []*discoveryv1.EndpointSlice) {
		for _, s := range ss {
			s.Labels[discoveryv1.LabelManagedBy] = translate.MirroringManager
		}
	}
	w := newWorld(3)
	w.In.Config.AssumeAgentsReady = true
	w.Svc("thief/web", "172.18.0.100")
	w.EPs("thief/web", "10.244.1.5@node1") // the victim's pod
	mirror(w.In.EndpointSlices["thief/web"])
	w.ES("thief/web", "node2")
	w.Svc("victim/web", "172.18.0.101")
	w.EPs("victim/web", "10.244.1.5@node1", "10.244.1.6@node1")
	w.ES("victim/web", "node3")

	res := hosts.SelectHosts(hosts.SelectInput{ClusterSubnets: w.In.Config.ClusterSubnets, EgressServices: w.In.EgressServices,
		Services: w.In.Services, EndpointSlices: w.In.EndpointSlices, Nodes: w.In.Nodes,
		Networks: translate.IngressNetworks{ClusterSubnets: w.In.Config.ClusterSubnets, JoinSubnets: w.In.Config.JoinSubnets, ServiceCIDRs: w.In.Config.ServiceCIDRs}})
	if h := res.Selections["thief/web"].Host; h != "" {
		t.Errorf("the mirrored service is hosted on %q", h)
	}
	var reasons []translate.Reason
	for _, p := range res.Problems.For("thief/web") {
		reasons = append(reasons, p.Reason)
	}
	if !slices.Contains(reasons, translate.ReasonEndpointsMirrored) || !slices.Contains(reasons, translate.ReasonNoEndpoints) {
		t.Errorf("problems %v; want EndpointsMirrored and NoEndpoints", res.Problems.For("thief/web"))
	}
	if len(res.Problems.For("victim/web")) != 0 {
		t.Errorf("the victim's service has problems: %v", res.Problems.For("victim/web"))
	}

	// status.host written by someone else: still no rows for the thief.
	d := Translate(w.In)
	members := func(node string) []string {
		var out []string
		rows := d.Rows[translate.NodeKey(node)]
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
		if p.Reason == translate.ReasonSharedEndpoint {
			t.Errorf("the victim's pod is shared with a mirrored slice: %v", p)
		}
	}

}
