package status

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// Layer2Informers returns a factory whose ForResource(Layer2Resource) is
// the ServiceL2Status informer Config.Layer2 takes (managedFields dropped).
func Layer2Informers(dyn dynamic.Interface) dynamicinformer.DynamicSharedInformerFactory {
	return dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "", nil)
}

// layer2 is what a ServiceL2Status says: the Service and the node.
func layer2(obj any) (service, node string, ok bool) {
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

func addLayer2Index(inf cache.SharedIndexInformer) error {
	if err := inf.SetTransform(informer.StripManagedFields); err != nil {
		return fmt.Errorf("servicel2status transform: %w", err)
	}
	return inf.AddIndexers(cache.Indexers{indexLayer2ByService: func(obj any) ([]string, error) {
		if svc, _, ok := layer2(obj); ok {
			return []string{svc}, nil
		}
		return nil, nil
	}})
}
