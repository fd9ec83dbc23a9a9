// Package informer builds the shared informer factories of every ovn-egress
// component, so that they all cache objects the same way.
package informer

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	eipinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/informers/externalversions"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// StripManagedFields drops metadata.managedFields from an object before an
// informer caches it. Nothing in ovn-egress reads them, and its writes
// (status updates, merge patches) leave them to the API server: an update
// that omits managedFields keeps the stored ones. With 10,000 Services,
// EndpointSlices and EgressServices they were a tenth of the master's heap.
func StripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// SlimPod keeps of a Pod what EgressIP's pod selection reads — its name,
// namespace, labels, node, host networking, phase and addresses — and drops
// the rest (containers, volumes, conditions, annotations) before an
// informer caches it: the EgressIP controllers watch every pod of the
// cluster. Other objects pass through StripManagedFields.
func SlimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return StripManagedFields(obj)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// Kube returns a factory for the Kubernetes types (no periodic resync);
// Pods are cached slim (SlimPod), everything without managedFields.
func Kube(c kubernetes.Interface, opts ...kubeinformers.SharedInformerOption) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(c, 0,
		append([]kubeinformers.SharedInformerOption{kubeinformers.WithTransform(SlimPod)}, opts...)...)
}

// Egress returns a factory for the EgressService type (no periodic resync).
// Each observe function sees every EgressService the informer receives
// before its managedFields are dropped (who wrote the status is read there).
func Egress(c egressclient.Interface, observe ...func(*egressv1.EgressService)) egressinformers.SharedInformerFactory {
	transform := StripManagedFields
	if len(observe) > 0 {
		transform = func(obj any) (any, error) {
			if es, ok := obj.(*egressv1.EgressService); ok {
				for _, f := range observe {
					f(es)
				}
			}
			return StripManagedFields(obj)
		}
	}
	return egressinformers.NewSharedInformerFactoryWithOptions(c, 0, egressinformers.WithTransform(transform))
}

// Reports returns a factory for the node agents' report ConfigMaps in
// namespace ns (translate.ReportLabel): the master and the zone
// translators read them, and nothing else of the namespace.
func Reports(c kubernetes.Interface, ns string) kubeinformers.SharedInformerFactory {
	return Kube(c, kubeinformers.WithNamespace(ns), kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = translate.ReportLabel
	}))
}

// OwnReport returns a factory for node's own report ConfigMaps in ns (the
// agent reads back what it wrote).
func OwnReport(c kubernetes.Interface, ns, node string) kubeinformers.SharedInformerFactory {
	return Kube(c, kubeinformers.WithNamespace(ns), kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = translate.ReportNodeLabel + "=" + translate.ReportNodeHash(node)
	}))
}

// EgressIP returns a factory for the EgressIP API that drops managedFields.
func EgressIP(c eipclient.Interface) eipinformers.SharedInformerFactory {
	return eipinformers.NewSharedInformerFactoryWithOptions(c, 0, eipinformers.WithTransform(StripManagedFields))
}
