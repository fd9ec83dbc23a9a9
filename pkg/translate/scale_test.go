package translate

import (
	"fmt"
	"testing"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// BenchmarkTranslateScale translates 10,000 services × 4 endpoints on 50
// hosts (the size of DESIGN §6), all keys at once.
func BenchmarkTranslateScale(b *testing.B) {
	w := scaleWorld()
	if d := Translate(w.in); len(d.Problems) > 0 {
		b.Logf("%d problems, first %v", len(d.Problems), d.Problems[0])
	}
	b.ResetTimer()
	for range b.N {
		d := Translate(w.in)
		if len(d.Rows) < 50 {
			b.Fatal(len(d.Rows))
		}
	}
}

// BenchmarkIndexDrain is the master's translation when a host is drained
// at the scale above: its 200 services move to the other 49 hosts, the
// Index translates those 200 again and renders the 50 hosts' rows.
func BenchmarkIndexDrain(b *testing.B) {
	w := scaleWorld()
	x := w.index()
	x.Rows(x.Keys())
	x.Touched()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		moved := w.drain(i)
		b.StartTimer()
		for _, es := range moved {
			key := EgressServiceKey(es)
			x.SetService(ServiceObjects{EgressService: es, Service: w.in.Services[key], Slices: w.in.EndpointSlices[key]})
		}
		touched := x.Touched()
		if d := x.Rows(touched); len(d.Rows) < 49 {
			b.Fatal(len(d.Rows))
		}
	}
}

// index is an Index of the world's input.
func (w *world) index() *Index {
	x := NewIndex(w.in.Config, w.in.Zone, MembersMap(w.in.Current))
	for name, n := range w.in.Nodes {
		x.SetNode(name, n)
	}
	for _, es := range w.in.EgressServices {
		key := EgressServiceKey(es)
		x.SetService(ServiceObjects{EgressService: es, Service: w.in.Services[key], Slices: w.in.EndpointSlices[key]})
	}
	return x
}

// drain moves the services of scaleWorld's host 1+i%50 to the other 49,
// as new objects, and returns them.
func (w *world) drain(i int) []*egressv1.EgressService {
	victim := fmt.Sprintf("node%d", 1+i%50)
	var moved []*egressv1.EgressService
	for j, es := range w.in.EgressServices {
		if es.Status.Host == victim {
			c := es.DeepCopy()
			c.Status.Host = fmt.Sprintf("node%d", 1+(i+1+len(moved)%49)%50)
			w.in.EgressServices[j] = c
			moved = append(moved, c)
		}
	}
	return moved
}

// scaleWorld is 10,000 services × 4 endpoints hosted on 50 nodes, agents
// taken as ready.
func scaleWorld() *world {
	w := newWorld(50)
	w.in.Config.AssumeAgentsReady = true
	for s := 0; s < 10000; s++ {
		key := fmt.Sprintf("ns%d/svc%d", s%100, s)
		w.es(key, fmt.Sprintf("node%d", 1+s%50))
		w.svc(key, fmt.Sprintf("172.%d.%d.%d", 19+s/62500, (s/250)%250, 1+s%250))
		var eps []string
		for e := 0; e < 4; e++ {
			i := s*4 + e
			eps = append(eps, fmt.Sprintf("10.244.%d.%d@node%d", i/250, 1+i%250, 1+i%50))
		}
		w.eps(key, eps...)
	}
	return w
}

// BenchmarkSelectHostsEnvelope places 10,000 unassigned EgressServices on
// 5,000 nodes (the Kubernetes scalability envelope), one in ten with
// externalTrafficPolicy Local, one in four with a zone selector: the
// master's selection pass after a restart with empty status.
func BenchmarkSelectHostsEnvelope(b *testing.B) {
	w := newWorld(0)
	in := w.selectIn()
	for i := 1; i <= 5000; i++ {
		name := fmt.Sprintf("node%d", i)
		in.Nodes[name] = &NodeInfo{Name: name, Ready: true, Labels: map[string]string{"zone": fmt.Sprint(i % 3)}}
	}
	for s := 0; s < 10000; s++ {
		key := fmt.Sprintf("ns%d/svc%d", s%100, s)
		e := w.es(key, "")
		if s%4 == 0 {
			e.Spec.NodeSelector.MatchLabels = map[string]string{"zone": fmt.Sprint(s % 3)}
		}
		svc := w.svc(key, fmt.Sprintf("172.%d.%d.%d", 19+s/62500, (s/250)%250, 1+s%250))
		if s%10 == 0 {
			svc.Spec.ExternalTrafficPolicy = "Local"
		}
		var eps []string
		for e := 0; e < 15; e++ {
			i := s*15 + e
			eps = append(eps, fmt.Sprintf("10.244.%d.%d@node%d", i/250%250, 1+i%250, 1+i%5000))
		}
		w.eps(key, eps...)
	}
	in.EgressServices, in.Services, in.EndpointSlices = w.in.EgressServices, w.in.Services, w.in.EndpointSlices
	b.ResetTimer()
	for range b.N {
		if res := SelectHosts(in); len(res.Allocations) != 5000 {
			b.Fatalf("%d hosts used", len(res.Allocations))
		}
	}
}
