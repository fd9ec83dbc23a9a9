package translation

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// The Kubernetes handlers only name what changed: an EgressService (its
// own change, its Service's, its slices'), or a node (its annotations and
// addresses, its agent's report). Which rows that moves is the sync's
// business.

func (c *Controller) registerHandlers(es, svc, slices, nodes cache.SharedIndexInformer) error {
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{es, controller.OnChange(func(old, cur any) {
			if a, b := asEgressService(old), asEgressService(cur); translate.ConditionsOnly(a, b) {
				return // the status controller's write: nothing translation reads
			}
			for _, o := range []any{old, cur} {
				if e, ok := controller.As[*egressv1.EgressService](o); ok {
					c.work.Add(serviceKey(translate.EgressServiceKey(e)))
					return // one object's key
				}
			}
		})},
		{svc, controller.OnChange(func(old, cur any) {
			for _, o := range []any{cur, old} {
				if s, ok := controller.As[*corev1.Service](o); ok {
					c.addService(s.Namespace, s.Name)
					return
				}
			}
		})},
		{slices, controller.OnChange(func(old, cur any) {
			for _, o := range []any{cur, old} {
				if s, ok := controller.As[*discoveryv1.EndpointSlice](o); ok && s.Labels[discoveryv1.LabelServiceName] != "" {
					c.addService(s.Namespace, s.Labels[discoveryv1.LabelServiceName])
					return
				}
			}
		})},
		{nodes, cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { c.addNode(o) },
			UpdateFunc: func(old, cur any) {
				if nodeChanged(old, cur) {
					c.addNode(cur)
				}
			},
			DeleteFunc: func(o any) { c.addNode(controller.Tombstone(o)) },
		}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return err
		}
	}
	return nil
}

// addService enqueues the EgressService of a Service, when there is one
// (when it comes later, its own event reads the Service then).
func (c *Controller) addService(ns, name string) {
	if _, err := c.es.esLister.EgressServices(ns).Get(name); err == nil {
		c.work.Add(serviceKey(ns + "/" + name))
	}
}

func (c *Controller) addNode(o any) {
	if n, ok := controller.As[*corev1.Node](o); ok {
		c.work.Add(nodeRowsKey(n.Name))
	}
}

// reportHandler enqueues the node whose report ConfigMap changed.
func (c *Controller) reportHandler() cache.ResourceEventHandler {
	add := func(o any) {
		if cm, ok := controller.As[*corev1.ConfigMap](o); ok && cm.Data[translate.ReportNodeKey] != "" {
			c.work.Add(nodeRowsKey(cm.Data[translate.ReportNodeKey]))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: add,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.ConfigMap)
			n, ok2 := cur.(*corev1.ConfigMap)
			if !ok1 || !ok2 || !maps.Equal(o.Data, n.Data) {
				add(cur)
			}
		},
		DeleteFunc: func(o any) { add(controller.Tombstone(o)) },
	}
}

// nodeChanged reports the Node changes translation reads: annotations
// (subnets, join and transit addresses, gateway mode, zone, the agent's
// readiness report) and addresses (the node-IP sets). Labels and readiness
// are host selection's business (it writes status.host, which moves the
// services); ignoring them keeps the label patches of a drain — one per
// host that gained or lost services — from syncing those hosts again.
func nodeChanged(old, cur any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	if !maps.Equal(o.Annotations, n.Annotations) || len(o.Status.Addresses) != len(n.Status.Addresses) {
		return true
	}
	for i := range o.Status.Addresses {
		if o.Status.Addresses[i] != n.Status.Addresses[i] {
			return true
		}
	}
	return false
}

// asEgressService is an event's EgressService, nil for anything else.
func asEgressService(o any) *egressv1.EgressService {
	e, _ := controller.As[*egressv1.EgressService](o)
	return e
}
