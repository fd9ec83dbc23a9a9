package hosts

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestSelectHostsDampsSelectorMoves: a damped EgressService whose selector
// no longer matches its host keeps the host (HostMoveDamped) while the host
// is otherwise fine; a host that is not Ready or unreachable is left at once
// however damped; an undamped one moves.
func TestSelectHostsDampsSelectorMoves(t *testing.T) {
	onNode2 := func(es *egressv1.EgressService) {
		es.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node2"}}
	}
	for _, tc := range []struct {
		name        string
		damped      bool
		notReady    bool
		unreachable bool
		want        string
	}{
		{name: "damped", damped: true, want: "node1"},
		{name: "not damped", want: "node2"},
		{name: "damped, host not Ready", damped: true, notReady: true, want: "node2"},
		{name: "damped, host unreachable", damped: true, unreachable: true, want: "node2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(3)
			for name, n := range w.In.Nodes {
				n.Labels = map[string]string{"kubernetes.io/hostname": name}
			}
			w.In.Nodes["node1"].Ready = !tc.notReady
			w.lb("ns/web", "node1", onNode2)
			in := w.selectIn()
			in.Reachable = map[string]bool{"node1": !tc.unreachable}
			if tc.damped {
				in.Damped = map[string]bool{"ns/web": true}
			}
			res := SelectHosts(in)
			sel := res.Selections["ns/web"]
			if sel.Host != tc.want || sel.Damped != (tc.want == "node1") {
				t.Errorf("selection %+v; want host %s", sel, tc.want)
			}
			var damped bool
			for _, p := range res.Problems.For("ns/web") {
				damped = damped || p.Reason == translate.ReasonHostMoveDamped
			}
			if damped != sel.Damped {
				t.Errorf("problems %v; HostMoveDamped wanted: %v", res.Problems.For("ns/web"), sel.Damped)
			}
		})
	}
}
