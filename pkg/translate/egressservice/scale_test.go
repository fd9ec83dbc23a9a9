package egressservice

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"testing"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// BenchmarkTranslateScale translates 10,000 services × 4 endpoints on 50
// hosts (the size of DESIGN §6), all keys at once.
func BenchmarkTranslateScale(b *testing.B) {
	w := scaleWorld()
	if d := Translate(w.In); len(d.Problems) > 0 {
		b.Logf("%d problems, first %v", len(d.Problems), d.Problems[0])
	}
	b.ResetTimer()
	for range b.N {
		d := Translate(w.In)
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
			key := translate.EgressServiceKey(es)
			x.SetService(ServiceObjects{EgressService: es, Service: w.In.Services[key], Slices: w.In.EndpointSlices[key]})
		}
		touched := x.Touched()
		if d := x.Rows(touched); len(d.Rows) < 49 {
			b.Fatal(len(d.Rows))
		}
	}
}

// index is an Index of the world's input.
func (w *world) index() *Index {
	x := NewIndex(w.In.Config, w.In.Zone, MembersMap(w.In.Current))
	for name, n := range w.In.Nodes {
		x.SetNode(name, n)
	}
	for _, es := range w.In.EgressServices {
		key := translate.EgressServiceKey(es)
		x.SetService(ServiceObjects{EgressService: es, Service: w.In.Services[key], Slices: w.In.EndpointSlices[key]})
	}
	return x
}

// drain moves the services of scaleWorld's host 1+i%50 to the other 49,
// as new objects, and returns them.
func (w *world) drain(i int) []*egressv1.EgressService {
	victim := fmt.Sprintf("node%d", 1+i%50)
	var moved []*egressv1.EgressService
	for j, es := range w.In.EgressServices {
		if es.Status.Host == victim {
			c := es.DeepCopy()
			c.Status.Host = fmt.Sprintf("node%d", 1+(i+1+len(moved)%49)%50)
			w.In.EgressServices[j] = c
			moved = append(moved, c)
		}
	}
	return moved
}

// scaleWorld is 10,000 services × 4 endpoints hosted on 50 nodes, agents
// taken as ready.
func scaleWorld() *world {
	w := newWorld(50)
	w.In.Config.AssumeAgentsReady = true
	for s := 0; s < 10000; s++ {
		key := fmt.Sprintf("ns%d/svc%d", s%100, s)
		w.ES(key, fmt.Sprintf("node%d", 1+s%50))
		w.Svc(key, fmt.Sprintf("172.%d.%d.%d", 19+s/62500, (s/250)%250, 1+s%250))
		var eps []string
		for e := 0; e < 4; e++ {
			i := s*4 + e
			eps = append(eps, fmt.Sprintf("10.244.%d.%d@node%d", i/250, 1+i%250, 1+i%50))
		}
		w.EPs(key, eps...)
	}
	return w
}
