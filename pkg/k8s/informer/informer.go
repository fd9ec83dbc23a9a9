// Package informer builds the shared informer factories of every ovn-egress
// component, so that they all cache objects the same way.
package informer

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
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

// Slim trims an object before an informer caches it to what ovn-egress
// reads of it. Every agent holds the whole cluster's Nodes and
// EndpointSlices (and the EgressIP controllers every Pod), so at 5,000
// nodes what the kubelet and the EndpointSlice controller write beside
// it — a Node's images, capacity and system info, each endpoint's target
// pod and zone — was most of an agent's heap. Pods, Nodes and
// EndpointSlices are rebuilt from the fields read; every other object
// loses its managedFields alone. Nothing writes a cached object back with
// Update (Nodes are patched), so nothing dropped here reaches the API.
func Slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.Node:
		return slimNode(o), nil
	case *discoveryv1.EndpointSlice:
		return slimSlice(o), nil
	}
	return StripManagedFields(obj)
}

// slimMeta keeps an object's identity, labels and deletion; annotations
// when asked.
func slimMeta(m *metav1.ObjectMeta, annotations bool) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, Labels: m.Labels, DeletionTimestamp: m.DeletionTimestamp}
	if annotations {
		out.Annotations = m.Annotations
		if _, ok := m.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
			out.Annotations = make(map[string]string, len(m.Annotations)-1)
			for k, v := range m.Annotations {
				if k != corev1.LastAppliedConfigAnnotation {
					out.Annotations[k] = v
				}
			}
		}
	}
	return out
}

// slimPod keeps what EgressIP's pod selection reads: name, namespace,
// labels, node, host networking, phase and addresses.
func slimPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: slimMeta(&p.ObjectMeta, false),
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
}

// slimNode keeps what translation (ovn-kubernetes' annotations), host
// selection (labels, conditions, unschedulable, taints) and the health
// checks (addresses) read.
func slimNode(n *corev1.Node) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: slimMeta(&n.ObjectMeta, true),
		Spec:       corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses, Conditions: n.Status.Conditions},
	}
}

// slimSlice keeps a slice's service label, address type and each
// endpoint's addresses, conditions and node.
func slimSlice(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{ObjectMeta: slimMeta(&s.ObjectMeta, false), AddressType: s.AddressType}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
		for i, e := range s.Endpoints {
			out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions, NodeName: e.NodeName}
		}
	}
	return out
}

// Kube returns a factory for the Kubernetes types (no periodic resync);
// Pods, Nodes and EndpointSlices are cached slim (Slim), everything without
// managedFields.
func Kube(c kubernetes.Interface, opts ...kubeinformers.SharedInformerOption) kubeinformers.SharedInformerFactory {
	return kubeinformers.NewSharedInformerFactoryWithOptions(c, 0,
		append([]kubeinformers.SharedInformerOption{kubeinformers.WithTransform(Slim)}, opts...)...)
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

// Shared are the informer factories the components of one process share —
// a node agent and its zone's translation — so that the process caches
// each Service, EndpointSlice, Node and EgressService once. Each component
// registers its informers, handlers and indexers on them (indexers may be
// added to a running informer) and starts them; they stop together.
type Shared struct {
	Kube   kubeinformers.SharedInformerFactory
	Egress egressinformers.SharedInformerFactory
}

// NewShared returns the factories Kube and Egress return.
//
// Their EgressServices are without status.conditions: a node agent and its
// zone read the spec and status.host and never write an EgressService, and
// the conditions (about 1 KB an object) would cost every node's agent the
// whole cluster's.
func NewShared(kube kubernetes.Interface, egress egressclient.Interface) *Shared {
	return &Shared{Kube: Kube(kube), Egress: egressinformers.NewSharedInformerFactoryWithOptions(egress, 0, egressinformers.WithTransform(withoutConditions))}
}

// withoutConditions drops an EgressService's managedFields and
// status.conditions.
func withoutConditions(obj any) (any, error) {
	if es, ok := obj.(*egressv1.EgressService); ok {
		es.Status.Conditions = nil
	}
	return StripManagedFields(obj)
}
