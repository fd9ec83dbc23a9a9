package nbsync

import (
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// endpointCache keeps each Service's parsed endpoints while the Service
// and its EndpointSlices are unchanged (by resourceVersion): a sync that
// touches every host then parses only what changed.
type endpointCache struct {
	mu      sync.Mutex
	entries map[string]endpointEntry
}

type endpointEntry struct {
	version string
	eps     []translate.Endpoint
}

func newEndpointCache() *endpointCache { return &endpointCache{entries: map[string]endpointEntry{}} }

func (c *endpointCache) get(key string, svc *corev1.Service, eps []*discoveryv1.EndpointSlice, clusterSubnets []netip.Prefix) []translate.Endpoint {
	// Objects without a resourceVersion (informers fed by hand, fakes)
	// cannot be told apart from their older selves: never cached.
	if svc.ResourceVersion == "" {
		return translate.ServiceEndpoints(svc, eps, clusterSubnets)
	}
	parts := make([]string, 0, len(eps)+1)
	parts = append(parts, svc.ResourceVersion)
	for _, s := range eps {
		if s.ResourceVersion == "" {
			return translate.ServiceEndpoints(svc, eps, clusterSubnets)
		}
		parts = append(parts, s.Name+"@"+s.ResourceVersion)
	}
	slices.Sort(parts[1:])
	version := strings.Join(parts, ",")
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok && e.version == version {
		return e.eps
	}
	out := translate.ServiceEndpoints(svc, eps, clusterSubnets)
	c.entries[key] = endpointEntry{version: version, eps: out}
	return out
}

func (c *endpointCache) forget(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}
