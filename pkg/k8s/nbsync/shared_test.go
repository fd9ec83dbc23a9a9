package nbsync

import (
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func slice(ns, name string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// TestAddressIndex: the index follows slices through adds, updates that
// move an address between slices, and deletes, and names the addresses in
// more than one slice.
func TestAddressIndex(t *testing.T) {
	x := newAddressIndex()
	a1 := slice("a", "web-1", "10.0.0.1", "10.0.0.2")
	b1 := slice("b", "db-1", "10.0.0.2")
	x.update(nil, a1)
	x.update(nil, b1)
	if got := x.slices("10.0.0.2"); !slices.Equal(got, []string{"a/web-1", "b/db-1"}) {
		t.Errorf("10.0.0.2 in %v", got)
	}
	if got := x.shared(); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Errorf("shared %v", got)
	}
	// web-1 drops 10.0.0.2 and takes 10.0.0.3: db-1 alone holds .2 now.
	a2 := slice("a", "web-1", "10.0.0.1", "10.0.0.3")
	x.update(a1, a2)
	if got := x.slices("10.0.0.2"); !slices.Equal(got, []string{"b/db-1"}) {
		t.Errorf("10.0.0.2 in %v after web-1 left it", got)
	}
	if got := x.shared(); len(got) != 0 {
		t.Errorf("shared %v, want none", got)
	}
	// One slice holding one address twice, then once.
	b2 := slice("b", "db-1", "10.0.0.3", "10.0.0.3")
	x.update(b1, b2)
	x.update(b2, slice("b", "db-1", "10.0.0.3"))
	if got := x.slices("10.0.0.3"); !slices.Equal(got, []string{"a/web-1", "b/db-1"}) {
		t.Errorf("10.0.0.3 in %v", got)
	}
	x.update(a2, nil)
	x.update(slice("b", "db-1", "10.0.0.3"), nil)
	if len(x.one) != 0 || len(x.many) != 0 {
		t.Errorf("after every slice is gone: one %v, many %v", x.one, x.many)
	}
}
