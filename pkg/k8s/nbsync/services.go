package nbsync

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// serviceCache keeps, per EgressService key, the Service, its
// EndpointSlices and their parsed endpoints, as last read from the
// listers. The Service and EndpointSlice handlers mark a key dirty; a sync
// reads the listers again only for dirty or new keys. So a sync that
// touches every host reads and parses only what changed, and hands
// translation the very same endpoint slice for an unchanged Service, which
// is what lets translation's Memo reuse the service.
//
// A handler runs after the informer's store has the new object, and a sync
// clears a key's mark before it reads the listers: a change is either read
// by this sync or leaves the key dirty (and enqueued) for the next.
type serviceCache struct {
	mu      sync.Mutex
	entries map[string]serviceEntry
	dirty   map[string]bool
}

type serviceEntry struct {
	svc    *corev1.Service // nil: no such Service
	slices []*discoveryv1.EndpointSlice
	eps    []translate.Endpoint
}

func newServiceCache() *serviceCache {
	return &serviceCache{entries: map[string]serviceEntry{}, dirty: map[string]bool{}}
}

// markDirty is called by the handlers of Services and EndpointSlices.
func (c *serviceCache) markDirty(key string) {
	c.mu.Lock()
	c.dirty[key] = true
	c.mu.Unlock()
}

// markAllDirty makes the next syncs read every service again (the periodic
// resync re-reads everything, trusting no cache).
func (c *serviceCache) markAllDirty() {
	c.mu.Lock()
	for key := range c.entries {
		c.dirty[key] = true
	}
	c.mu.Unlock()
}

// forget drops a deleted EgressService's entry.
func (c *serviceCache) forget(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

// cached returns the entry of a clean key; ok is false when the key must be
// read again, and its mark is cleared then.
func (c *serviceCache) cached(key string) (serviceEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if ok && !c.dirty[key] {
		return e, true
	}
	delete(c.dirty, key)
	return e, false
}

// peek returns a key's entry and whether it is clean, leaving its mark.
func (c *serviceCache) peek(key string) (serviceEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return e, ok && !c.dirty[key]
}

func (c *serviceCache) put(key string, e serviceEntry) {
	c.mu.Lock()
	c.entries[key] = e
	c.mu.Unlock()
}

// service returns the Service, slices and endpoints of an EgressService
// key, from the cache or read again from the listers.
func (c *Controller) service(ns, name string) (serviceEntry, error) {
	key := ns + "/" + name
	prev, ok := c.services.cached(key)
	if ok {
		return prev, nil
	}
	svc, err := c.svcLister.Services(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return prev, err
	}
	slices, err := c.slicesOf(key)
	if err != nil {
		return prev, err
	}
	e := serviceEntry{svc: svc, slices: slices}
	switch {
	case svc == nil:
	case prev.svc == svc && sameObjects(prev.slices, slices):
		e.eps = prev.eps // the same objects: the same parse
	default:
		e.eps = translate.ServiceEndpoints(svc, slices, c.cfg.Translate.ClusterSubnets)
	}
	c.services.put(key, e)
	return e, nil
}

// sameObjects reports whether a and b hold the same objects, in any order
// (an index returns a Service's slices in no particular order).
func sameObjects[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
