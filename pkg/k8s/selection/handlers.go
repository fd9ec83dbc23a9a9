package selection

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

func addIndexers(es, svc, slices cache.SharedIndexInformer) error {
	if err := controller.AddIndexers(es, controller.IndexByHost, controller.IndexByHostLabel); err != nil {
		return fmt.Errorf("egressservice: %w", err)
	}
	if err := controller.AddIndexers(svc, controller.IndexByIngressIP); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := controller.AddIndexers(slices, controller.IndexByService); err != nil {
		return fmt.Errorf("endpointslice: %w", err)
	}
	return nil
}

// Event handlers only map objects to keys and enqueue them:
//   - an EgressService: itself, those with the same host label, those of
//     the Services that share its Service's ingress IPs, the nodes of its
//     old and new host (labels) and, when it leaves a node under a cap per
//     node, the unassigned ones (there is room now);
//   - a Service or EndpointSlice: the EgressService of the same name; a
//     Service, also those of every Service with one of its old or new
//     ingress IPs (an IP of two namespaces hosts neither);
//   - a Node: its labels; on a change of labels or readiness, the
//     EgressServices it hosts (they may have to move) and the unassigned
//     ones (they may fit now); on deletion, the ones it hosted.
func (c *Controller) registerHandlers(es, svc, slices, nodes cache.SharedIndexInformer) error {
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{es, cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { c.enqueueEgressService(o, nil) },
			UpdateFunc: func(old, cur any) {
				c.enqueueEgressService(cur, old)
			},
			DeleteFunc: func(o any) {
				if e, ok := controller.As[*egressv1.EgressService](o); ok {
					c.events.forget(translate.EgressServiceKey(e))
					c.enqueueWaitingForRoom(e.Status.Host)
				}
				c.enqueueEgressService(o, nil)
			},
		}},
		{svc, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { c.enqueueService(o, nil) },
			UpdateFunc: func(old, cur any) { c.enqueueService(cur, old) },
			DeleteFunc: func(o any) { c.enqueueService(o, nil) },
		}},
		{slices, cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { c.enqueueSlice(o) },
			UpdateFunc: func(old, cur any) {
				// Each key once per event: a key added twice can be taken
				// by the worker between the Adds and synced twice.
				c.enqueueSlice(cur)
				if serviceOf(old) != serviceOf(cur) {
					c.enqueueSlice(old)
				}
			},
			DeleteFunc: func(o any) { c.enqueueSlice(o) },
		}},
		{nodes, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { c.enqueueNode(o, nil) },
			UpdateFunc: func(old, cur any) { c.enqueueNode(cur, old) },
			DeleteFunc: func(o any) {
				if n, ok := controller.As[*corev1.Node](o); ok {
					c.enqueueHostedOn(n.Name)
					c.enqueueSharers(translate.NodeAddresses(n), "")
				}
			},
		}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) enqueueEgressService(o, old any) {
	e, ok := controller.As[*egressv1.EgressService](o)
	if !ok {
		return
	}
	self := translate.EgressServiceKey(e)
	c.work.Add(key{name: self})
	// Those with the same host label: whether this one exists (and when it
	// was created) decides which of them is hosted.
	objs, _ := c.esIndexer.ByIndex(controller.IndexByHostLabel, hosts.NodeLabel(e.Namespace, e.Name))
	for _, o := range objs {
		if other, ok := o.(*egressv1.EgressService); ok && translate.EgressServiceKey(other) != self {
			c.work.Add(key{name: translate.EgressServiceKey(other)})
		}
	}
	// Those whose Service shares an ingress IP with this one's: whether
	// this one exists (and takes its IP from the load balancer) decides
	// whether theirs is shared.
	if svc, err := c.svcLister.Services(e.Namespace).Get(e.Name); err == nil {
		c.enqueueSharers(ingressOf(svc), self)
	}
	c.enqueueNodeLabels(e.Status.Host)
	if prev, ok := old.(*egressv1.EgressService); ok && prev.Status.Host != e.Status.Host {
		c.enqueueNodeLabels(prev.Status.Host)
		c.enqueueWaitingForRoom(prev.Status.Host)
	}
}

// enqueueWaitingForRoom enqueues the unassigned EgressServices when host,
// a node, has just lost one and a cap per node may have kept them waiting.
func (c *Controller) enqueueWaitingForRoom(host string) {
	if c.cfg.MaxPerNode > 0 && host != "" && host != egressv1.HostAll {
		c.enqueueHostedOn("")
	}
}

// enqueueNodeLabels enqueues a host's labels check (not for "" or ALL).
func (c *Controller) enqueueNodeLabels(host string) {
	if host != "" && host != egressv1.HostAll {
		c.work.Add(key{node: true, name: host})
	}
}

// enqueueByName enqueues the EgressService namespace/name if there is one.
func (c *Controller) enqueueByName(ns, name string) {
	if _, err := c.esLister.EgressServices(ns).Get(name); err == nil {
		c.work.Add(key{name: ns + "/" + name})
	}
}

// enqueueService enqueues the Service's EgressService and, when its
// ingress IPs were added, removed or changed, those of the Services that
// share an old or new one.
func (c *Controller) enqueueService(o, old any) {
	s, ok := controller.As[*corev1.Service](o)
	if !ok {
		return
	}
	c.enqueueByName(s.Namespace, s.Name)
	var before []netip.Addr
	if prev, ok := old.(*corev1.Service); ok {
		before = ingressOf(prev)
	}
	now := ingressOf(s)
	if old != nil && slices.Equal(before, now) {
		return
	}
	c.enqueueSharers(append(before, now...), s.Namespace+"/"+s.Name)
}

// enqueueSharers enqueues the EgressServices of every Service with one of
// ips as its ingress IP, but self's.
func (c *Controller) enqueueSharers(ips []netip.Addr, self string) {
	for _, ip := range ips {
		objs, _ := c.svcIndex.ByIndex(controller.IndexByIngressIP, ip.String())
		for _, o := range objs {
			if sv, ok := o.(*corev1.Service); ok && sv.Namespace+"/"+sv.Name != self {
				c.enqueueByName(sv.Namespace, sv.Name)
			}
		}
	}
}

// ingressOf is a Service's ingress IPs, canonical and sorted.
func ingressOf(s *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range s.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, ipfamily.Canonical(ip))
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func (c *Controller) enqueueSlice(o any) {
	if s, ok := controller.As[*discoveryv1.EndpointSlice](o); ok && s.Labels[discoveryv1.LabelServiceName] != "" {
		c.enqueueByName(s.Namespace, s.Labels[discoveryv1.LabelServiceName])
	}
}

// serviceOf is the "namespace/name" of the Service a slice belongs to.
func serviceOf(o any) string {
	if s, ok := controller.As[*discoveryv1.EndpointSlice](o); ok && s.Labels[discoveryv1.LabelServiceName] != "" {
		return s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
	}
	return ""
}

// enqueueHostedOn enqueues every EgressService whose status.host is host
// ("" for the unassigned ones).
func (c *Controller) enqueueHostedOn(host string) {
	objs, _ := c.esIndexer.ByIndex(controller.IndexByHost, host)
	keys := make([]key, 0, len(objs))
	for _, o := range objs {
		if e, ok := o.(*egressv1.EgressService); ok {
			keys = append(keys, key{name: translate.EgressServiceKey(e)})
		}
	}
	c.work.Add(keys...) // one batch: the host's drain is decided and written at once
}

// enqueueNode ignores what host selection does not read (annotations,
// heartbeats): only labels and readiness matter here. The health checks
// read the management addresses from the lister at every round. A change
// of egress-service labels only needs the node's labels checked: selectors
// are not expected to select on the labels host selection itself writes,
// and re-deciding a node's EgressServices at every label patch would be
// wasted work.
func (c *Controller) enqueueNode(o, old any) {
	n, ok := controller.As[*corev1.Node](o)
	if !ok {
		return
	}
	prev, ok := old.(*corev1.Node)
	var prevLabels map[string]string
	if ok {
		prevLabels = prev.Labels
	}
	ownChanged := !ok || !maps.Equal(ownLabels(prevLabels, true), ownLabels(n.Labels, true))
	otherChanged := !ok || !maps.Equal(ownLabels(prevLabels, false), ownLabels(n.Labels, false))
	readyChanged := !ok || translate.NodeReady(prev) != translate.NodeReady(n)
	if ownChanged {
		c.work.Add(key{node: true, name: n.Name})
	}
	if otherChanged || readyChanged {
		c.enqueueHostedOn(n.Name)
		c.enqueueHostedOn("")
	}
	// A node address that is (or was) a Service's ingress IP refuses (or
	// no longer refuses) that IP as an egress source.
	now := translate.NodeAddresses(n)
	if !ok {
		c.enqueueSharers(now, "")
		return
	}
	if before := translate.NodeAddresses(prev); !slices.Equal(before, now) {
		c.enqueueSharers(append(before, now...), "")
	}
}

// ownLabels returns the egress-service labels (own) or all the others.
func ownLabels(l map[string]string, own bool) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if hosts.IsNodeLabel(k) == own {
			out[k] = v
		}
	}
	return out
}
