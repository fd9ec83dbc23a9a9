package nbsync

import (
	"slices"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
)

// sharedAddresses tracks the endpoint addresses that appear in more than
// one EndpointSlice: only they can make two EgressServices decide a
// conflict together, and they are rare, so gather looks at them instead of
// at every address of every service.
type sharedAddresses struct {
	mu    sync.Mutex
	addrs map[string]bool
}

func newSharedAddresses() *sharedAddresses { return &sharedAddresses{addrs: map[string]bool{}} }

// update re-counts the addresses of a slice that changed (the index is
// already up to date when informer handlers run).
func (s *sharedAddresses) update(index cache.Indexer, slice *discoveryv1.EndpointSlice) {
	if slice == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range slice.Endpoints {
		for _, a := range e.Addresses {
			objs, _ := index.ByIndex(controller.IndexByAddress, a)
			if len(objs) > 1 {
				s.addrs[a] = true
			} else {
				delete(s.addrs, a)
			}
		}
	}
}

func (s *sharedAddresses) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.addrs))
	for a := range s.addrs {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
