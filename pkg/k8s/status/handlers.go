package status

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Event handlers only map objects to the EgressServices they concern:
//   - an EgressService: itself;
//   - a Service or an EndpointSlice: the EgressService of the same name;
//   - a report (ConfigMap, or a Node's legacy annotation): the services
//     whose entries came, went or changed; a report that appears or goes,
//     also the services the node hosts (its annotation counts, or stops
//     counting);
//   - a ServiceL2Status: the EgressService of its Service, before and after.
func (c *Controller) registerHandlers(es, svc, slices, nodes cache.SharedIndexInformer) error {
	type handler struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}
	handlers := []handler{
		{es, controller.OnObject(func(o any) {
			if e, ok := controller.As[*egressv1.EgressService](o); ok {
				c.work.Add(translate.EgressServiceKey(e))
			}
		})},
		{svc, controller.OnObject(func(o any) {
			if s, ok := controller.As[*corev1.Service](o); ok {
				c.enqueueByName(s.Namespace + "/" + s.Name)
			}
		})},
		{slices, controller.OnObject(func(o any) {
			if s, ok := controller.As[*discoveryv1.EndpointSlice](o); ok && s.Labels[discoveryv1.LabelServiceName] != "" {
				c.enqueueByName(s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName])
			}
		})},
		{nodes, controller.OnChange(func(old, cur any) {
			before, _ := old.(*corev1.Node)
			after, _ := cur.(*corev1.Node)
			if after == nil && before != nil {
				c.enqueueHostedOn(before.Name)
			}
			if annotation(before) != annotation(after) {
				c.enqueueChanged(annotationReport(before), annotationReport(after))
			}
		})},
	}
	if c.cfg.Reports != nil {
		handlers = append(handlers, handler{c.cfg.Reports.Informer(), controller.OnChange(func(old, cur any) {
			before, _ := old.(*corev1.ConfigMap)
			after, _ := cur.(*corev1.ConfigMap)
			c.enqueueChanged(configMapReport(before), configMapReport(after))
			if (before == nil) != (after == nil) { // the node's annotation stops (or starts) counting
				c.enqueueHostedOn(either(before, after).Data[translate.ReportNodeKey])
			}
		})})
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return err
		}
	}
	return nil
}

// layer2Handler enqueues the EgressService of a ServiceL2Status's
// Service, before and after.
func (c *Controller) layer2Handler() cache.ResourceEventHandler {
	return controller.OnChange(func(old, cur any) {
		for _, o := range []any{old, cur} {
			if svc, _, ok := layer2Of(o); ok {
				c.enqueueByName(svc)
			}
		}
	})
}

// either is whichever of two ConfigMaps is there.
func either(a, b *corev1.ConfigMap) *corev1.ConfigMap {
	if a != nil {
		return a
	}
	return b
}

// enqueueByName enqueues the EgressService "namespace/name" if there is one.
func (c *Controller) enqueueByName(key string) {
	if _, ok, _ := c.esIndexer.GetByKey(key); ok {
		c.work.Add(key)
	}
}

// enqueueHostedOn enqueues the EgressServices node hosts, and those of
// every node (ALL), whose endpoints may be on it.
func (c *Controller) enqueueHostedOn(node string) {
	if node == "" {
		return
	}
	for _, h := range []string{node, egressv1.HostAll} {
		objs, _ := c.esIndexer.ByIndex(controller.IndexByHost, h)
		for _, o := range objs {
			if e, ok := o.(*egressv1.EgressService); ok {
				c.work.Add(translate.EgressServiceKey(e))
			}
		}
	}
}

// enqueueChanged enqueues the services whose report entries differ.
func (c *Controller) enqueueChanged(before, after translate.Report) {
	for _, k := range changedEntries(before, after) {
		c.enqueueByName(k)
	}
}

// changedEntries are the keys of the entries one report has and the other
// has not, or has otherwise, sorted.
func changedEntries(before, after translate.Report) []string {
	var out []string
	for k, b := range before {
		if a, ok := after[k]; !ok || !sameEntry(a, b) {
			out = append(out, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func sameEntry(a, b translate.ServiceReport) bool {
	return a.Network == b.Network && a.Endpoints == b.Endpoints && slices.Equal(a.IngressIPs, b.IngressIPs)
}

// annotation is a Node's legacy report annotation ("" for nil).
func annotation(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	return n.Annotations[translate.ReportAnnotation]
}

// annotationReport is a Node's legacy report (nil n, or unreadable: none).
func annotationReport(n *corev1.Node) translate.Report {
	r, _ := translate.ParseReport(annotation(n))
	return r
}

// configMapReport is a report ConfigMap's part (nil, or unreadable: none).
func configMapReport(cm *corev1.ConfigMap) translate.Report {
	if cm == nil {
		return nil
	}
	_, _, r, _ := translate.ParseReportConfigMap(cm)
	return maps.Clone(r)
}
