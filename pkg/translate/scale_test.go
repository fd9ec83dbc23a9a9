package translate

import (
	"fmt"
	"testing"
)

// BenchmarkTranslateScale translates 10,000 services × 4 endpoints on 50
// hosts (the size of DESIGN §6), all keys at once.
func BenchmarkTranslateScale(b *testing.B) {
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
