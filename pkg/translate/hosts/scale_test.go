package hosts

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"testing"
)

// BenchmarkSelectHostsEnvelope places 10,000 unassigned EgressServices on
// 5,000 nodes (the Kubernetes scalability envelope), one in ten with
// externalTrafficPolicy Local, one in four with a zone selector: the
// master's selection pass after a restart with empty status.
func BenchmarkSelectHostsEnvelope(b *testing.B) {
	w := newWorld(0)
	in := w.selectIn()
	for i := 1; i <= 5000; i++ {
		name := fmt.Sprintf("node%d", i)
		in.Nodes[name] = &translate.NodeInfo{Name: name, Ready: true, Labels: map[string]string{"zone": fmt.Sprint(i % 3)}}
	}
	for s := 0; s < 10000; s++ {
		key := fmt.Sprintf("ns%d/svc%d", s%100, s)
		e := w.ES(key, "")
		if s%4 == 0 {
			e.Spec.NodeSelector.MatchLabels = map[string]string{"zone": fmt.Sprint(s % 3)}
		}
		svc := w.Svc(key, fmt.Sprintf("172.%d.%d.%d", 19+s/62500, (s/250)%250, 1+s%250))
		if s%10 == 0 {
			svc.Spec.ExternalTrafficPolicy = "Local"
		}
		var eps []string
		for e := 0; e < 15; e++ {
			i := s*15 + e
			eps = append(eps, fmt.Sprintf("10.244.%d.%d@node%d", i/250%250, 1+i%250, 1+i%5000))
		}
		w.EPs(key, eps...)
	}
	in.EgressServices, in.Services, in.EndpointSlices = w.In.EgressServices, w.In.Services, w.In.EndpointSlices
	b.ResetTimer()
	for range b.N {
		if res := SelectHosts(in); len(res.Allocations) != 5000 {
			b.Fatalf("%d hosts used", len(res.Allocations))
		}
	}
}
