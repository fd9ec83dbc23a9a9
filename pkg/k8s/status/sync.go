package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
)

// sync converges the conditions of keys: gather each service's input from
// the listers, compute its conditions, write those that changed (in
// parallel). Each failed key's own error is returned.
func (c *Controller) sync(ctx context.Context, keys []string) error {
	standoff := ""
	if c.cfg.Standoff != nil {
		if why, blocked := c.cfg.Standoff.Blocked(); blocked {
			standoff = why // said on every object: its Ready is False for it
		}
	}
	var changed []*egressv1.EgressService
	for _, k := range keys {
		ns, name, err := cache.SplitMetaNamespaceKey(k)
		if err != nil {
			continue
		}
		es, err := c.esLister.EgressServices(ns).Get(name)
		if err != nil || (c.cfg.Standoff != nil && c.cfg.Standoff.Held(k)) {
			continue // gone; or its status is another writer's
		}
		in := c.gather(es)
		in.Standoff = standoff
		cur := es.DeepCopy()
		if conditions.Set(&cur.Status.Conditions, conditions.EgressService(in), metav1.NewTime(c.cfg.Now())) {
			changed = append(changed, cur)
		}
	}
	errs := controller.KeyErrors[string]{}
	var mu sync.Mutex
	controller.Parallel(len(changed), c.cfg.Writers, func(i int) {
		if err := c.write(ctx, changed[i]); err != nil {
			mu.Lock()
			errs[translate.EgressServiceKey(changed[i])] = err
			mu.Unlock()
		}
	})
	c.statsMu.Lock()
	c.stats.Syncs++
	c.statsMu.Unlock()
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// write updates the status of es (its lister copy with the new
// conditions). A conflict is no error: the API server has a newer version
// (host selection wrote status.host), whose event enqueues the key again,
// and the conditions are computed afresh from it.
func (c *Controller) write(ctx context.Context, es *egressv1.EgressService) error {
	_, err := c.egress.K8sV1().EgressServices(es.Namespace).UpdateStatus(ctx, es, metav1.UpdateOptions{FieldManager: fieldManager})
	switch {
	case err == nil:
		c.statsMu.Lock()
		c.stats.Writes++
		c.statsMu.Unlock()
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		c.statsMu.Lock()
		c.stats.Conflicts++
		c.statsMu.Unlock()
		return nil
	}
	return fmt.Errorf("write the conditions of %s: %w", translate.EgressServiceKey(es), err)
}

// gather reads what es's conditions are computed from.
func (c *Controller) gather(es *egressv1.EgressService) conditions.EgressServiceInput {
	k := translate.EgressServiceKey(es)
	in := conditions.EgressServiceInput{EgressService: es, ClusterSubnets: c.cfg.ClusterSubnets, Reports: map[string]translate.Report{}}
	if c.cfg.HostProblems != nil {
		in.HostProblems = c.cfg.HostProblems.HostProblems(k)
	}
	if svc, err := c.svcLister.Services(es.Namespace).Get(es.Name); err == nil {
		in.Service = svc
	}
	objs, _ := c.sliceIndex.ByIndex(controller.IndexByService, k)
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			in.EndpointSlices = append(in.EndpointSlices, s)
		}
	}
	slices.SortFunc(in.EndpointSlices, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for _, node := range conditions.CarryingNodes(es, in.Service, in.EndpointSlices, c.cfg.ClusterSubnets) {
		if r, ok := c.report(node); ok {
			in.Reports[node] = r
		}
	}
	if idx := c.layer2.indexer(); idx != nil {
		in.Layer2 = true
		objs, _ := idx.ByIndex(indexLayer2ByService, k)
		for _, o := range objs {
			if _, node, ok := layer2Of(o); ok && node != "" {
				in.Announcers = append(in.Announcers, node)
			}
		}
		slices.Sort(in.Announcers)
		in.Announcers = slices.Compact(in.Announcers)
	}
	return in
}

// report is node's agent's report: its ConfigMaps, or without them its
// Node's legacy annotation; false when it has neither.
func (c *Controller) report(node string) (translate.Report, bool) {
	var cms []*corev1.ConfigMap
	if c.reportIndex != nil {
		objs, _ := c.reportIndex.ByIndex(controller.IndexByReportNode, node)
		for _, o := range objs {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				cms = append(cms, cm)
			}
		}
	}
	n, err := c.nodeLister.Get(node)
	if err != nil {
		n = nil
	}
	if len(cms) == 0 && (n == nil || n.Annotations[translate.ReportAnnotation] == "") {
		return nil, false
	}
	r, err := translate.NodeReport(n, cms)
	if err != nil {
		c.log.WithError(err).WithField("node", node).Debug("part of a readiness report is unreadable")
	}
	return r, true
}
