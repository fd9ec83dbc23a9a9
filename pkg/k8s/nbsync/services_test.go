package nbsync

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The cache serves a key until a handler marks it dirty; a dirty key is
// read again once (its mark is cleared by the read), a resync marks all.
func TestServiceCacheMarks(t *testing.T) {
	c := newServiceCache()
	if _, ok := c.cached("ns/a"); ok {
		t.Fatal("an unknown key was served")
	}
	e := serviceEntry{svc: &corev1.Service{}}
	c.put("ns/a", e)
	c.put("ns/b", e)
	if got, ok := c.cached("ns/a"); !ok || got.svc != e.svc {
		t.Fatal("a clean key was not served")
	}
	c.markDirty("ns/a")
	if _, ok := c.cached("ns/a"); ok {
		t.Fatal("a dirty key was served")
	}
	// The read cleared the mark: what it puts is served.
	c.put("ns/a", e)
	if _, ok := c.cached("ns/a"); !ok {
		t.Fatal("the key stayed dirty after it was read")
	}
	c.markAllDirty()
	for _, k := range []string{"ns/a", "ns/b"} {
		if _, ok := c.cached(k); ok {
			t.Fatalf("%s was served after a resync marked everything", k)
		}
	}
	c.put("ns/b", e)
	c.forget("ns/b")
	if _, ok := c.cached("ns/b"); ok {
		t.Fatal("a forgotten key was served")
	}
}

func TestSameObjects(t *testing.T) {
	a, b, x := &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSlice{}
	for _, tc := range []struct {
		l, r []*discoveryv1.EndpointSlice
		want bool
	}{
		{nil, nil, true},
		{[]*discoveryv1.EndpointSlice{a, b}, []*discoveryv1.EndpointSlice{b, a}, true},
		{[]*discoveryv1.EndpointSlice{a, b}, []*discoveryv1.EndpointSlice{a, x}, false},
		{[]*discoveryv1.EndpointSlice{a}, []*discoveryv1.EndpointSlice{a, b}, false},
		// Equal content is not the same object.
		{[]*discoveryv1.EndpointSlice{a}, []*discoveryv1.EndpointSlice{x}, false},
	} {
		if got := sameObjects(tc.l, tc.r); got != tc.want {
			t.Errorf("sameObjects(%p, %p) = %v, want %v", tc.l, tc.r, got, tc.want)
		}
	}
}
