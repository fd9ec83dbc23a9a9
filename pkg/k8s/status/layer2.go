package status

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
)

// Layer2Resource is MetalLB's ServiceL2Status: which node announces a
// Service's load-balancer IP in layer 2 (status.node, status.serviceName,
// status.serviceNamespace; MetalLB 0.14 and later).
var Layer2Resource = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}

// DefaultLayer2Recheck is how often the API is asked whether it serves
// Layer2Resource until it does (MetalLB installed after ovn-egress).
const DefaultLayer2Recheck = 10 * time.Second

// indexLayer2ByService indexes ServiceL2Statuses by the Service they are for.
const indexLayer2ByService = "ovn-egress.layer2ByService"

// Layer2Served reports whether the API server serves Layer2Resource.
func Layer2Served(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(Layer2Resource.GroupVersion().String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discover %s: %w", Layer2Resource.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == Layer2Resource.Resource {
			return true, nil
		}
	}
	return false, nil
}

// layer2 is MetalLB's ServiceL2Statuses as the controller reads them:
// nothing until the API serves them, then an indexed informer.
type layer2 struct {
	discovery discovery.DiscoveryInterface
	dynamic   dynamic.Interface
	recheck   time.Duration

	mu    sync.Mutex
	index cache.Indexer // nil until served and synced
}

// indexer is the synced informer's indexer, nil before.
func (l *layer2) indexer() cache.Indexer {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.index
}

// run asks the API every recheck whether it serves ServiceL2Status; once
// it does, it starts an informer whose events go to on, waits for its
// cache, and calls served (every service's Announced can be known now).
func (l *layer2) run(ctx context.Context, on cache.ResourceEventHandler, served func(), log func(error)) {
	err := wait.PollUntilContextCancel(ctx, l.recheck, true, func(context.Context) (bool, error) {
		ok, err := Layer2Served(l.discovery)
		if err != nil {
			log(err)
		}
		return ok, nil
	})
	if err != nil {
		return // ctx ended
	}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(l.dynamic, 0, "", nil)
	inf := f.ForResource(Layer2Resource).Informer()
	if err := inf.SetTransform(informer.StripManagedFields); err != nil {
		log(err)
	}
	if err := inf.AddIndexers(cache.Indexers{indexLayer2ByService: func(obj any) ([]string, error) {
		if svc, _, ok := layer2Of(obj); ok {
			return []string{svc}, nil
		}
		return nil, nil
	}}); err != nil {
		log(err)
		return
	}
	if _, err := inf.AddEventHandler(on); err != nil {
		log(err)
		return
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	l.mu.Lock()
	l.index = inf.GetIndexer()
	l.mu.Unlock()
	served()
	<-ctx.Done()
}

// layer2Of is what a ServiceL2Status says: the Service and the node.
func layer2Of(obj any) (service, node string, ok bool) {
	u, ok := controller.As[*unstructured.Unstructured](obj)
	if !ok {
		return "", "", false
	}
	ns, _, _ := unstructured.NestedString(u.Object, "status", "serviceNamespace")
	name, _, _ := unstructured.NestedString(u.Object, "status", "serviceName")
	node, _, _ = unstructured.NestedString(u.Object, "status", "node")
	if ns == "" || name == "" {
		return "", "", false
	}
	return ns + "/" + name, node, true
}
