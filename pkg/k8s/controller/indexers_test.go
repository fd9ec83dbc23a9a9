package controller

import (
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// TestAddIndexersConcurrently: controllers sharing an informer add the same
// shared indexers at the same time (a node agent and its zone translation
// start side by side); every one succeeds and each indexer is there once.
// Without serializing the look and the add, client-go refuses the second
// add of a name as a conflict (and the look races with the add).
func TestAddIndexersConcurrently(t *testing.T) {
	for round := range 200 {
		inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			names := []string{IndexByService}
			if i%2 == 0 {
				names = []string{IndexByHost, IndexByService}
			}
			wg.Go(func() { errs <- AddIndexers(inf, names...) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if got := inf.GetIndexer().GetIndexers(); len(got) != 2 {
			t.Fatalf("round %d: indexers %v", round, got)
		}
	}
	if err := AddIndexers(cache.NewSharedIndexInformer(&cache.ListWatch{}, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{}), "nope"); err == nil {
		t.Error("an unknown indexer name was accepted")
	}
}
