package nbsync

import (
	"maps"
	"net/netip"
	"strings"

	libcache "github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Event handlers only map objects to keys and enqueue them. Each event
// collects its keys first and adds every one of them once: a key added twice
// by one event (an EndpointSlice update dirties the host of its old and of
// its new contents, usually the same) can be taken by the worker between the
// two Adds, and is then synced a second time for nothing.

// keySet holds the keys one event dirties, each with the EgressServices
// that moved on or off it (nil: the key is to be walked in full).
type keySet map[translate.Key]map[string]bool

// add dirties keys, to be walked in full.
func (ks keySet) add(keys ...translate.Key) {
	for _, k := range keys {
		ks[k] = nil
	}
}

// move dirties keys by EgressService svc moving on or off their hosts
// (other keys than nodes' are walked in full).
func (ks keySet) move(svc string, keys ...translate.Key) {
	for _, k := range keys {
		m, ok := ks[k]
		switch {
		case !k.IsNode():
			ks[k] = nil
		case ok && m == nil:
		case !ok:
			ks[k] = map[string]bool{svc: true}
		default:
			m[svc] = true
		}
	}
}

// on runs collect for one event, records why each key is dirty and
// enqueues the keys.
func (c *Controller) on(collect func(keySet)) {
	ks := keySet{}
	collect(ks)
	for k, moved := range ks {
		if moved == nil {
			c.dirt.full(k)
		}
		for svc := range moved {
			c.dirt.moved(k, svc)
		}
		c.work.Add(k)
	}
}

// add enqueues a key to be walked in full.
func (c *Controller) add(k translate.Key) {
	c.dirt.full(k)
	c.work.Add(k)
}

func (c *Controller) registerHandlers(es, svc, slices, nodes cache.SharedIndexInformer) error {
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{es, cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { c.on(func(ks keySet) { c.egressServiceKeys(ks, o) }) },
			UpdateFunc: func(old, cur any) {
				c.on(func(ks keySet) {
					o, ok1 := old.(*egressv1.EgressService)
					n, ok2 := cur.(*egressv1.EgressService)
					if ok1 && ok2 && o.Status.Host != n.Status.Host && o.Spec.SourceIPBy == n.Spec.SourceIPBy {
						// A host change (one of many when a host is drained)
						// dirties the old and the new host only: which service
						// keeps a shared endpoint does not depend on hosts.
						// Between two hosts (not Network mode's ALL) it is all
						// that changed for them: their other services stay.
						if o.Status.Host == egressv1.HostAll || n.Status.Host == egressv1.HostAll {
							ks.add(c.hostKeys(o)...)
							ks.add(c.hostKeys(n)...)
							return
						}
						svc := translate.EgressServiceKey(n)
						ks.move(svc, c.hostKeys(o)...)
						ks.move(svc, c.hostKeys(n)...)
						return
					}
					c.egressServiceKeys(ks, old)
					c.egressServiceKeys(ks, cur)
				})
			},
			DeleteFunc: func(o any) {
				c.on(func(ks keySet) { c.egressServiceKeys(ks, o) })
				if es, ok := controller.As[*egressv1.EgressService](o); ok {
					key := translate.EgressServiceKey(es)
					c.events.forget(key)
					c.services.forget(key)
					c.goneMu.Lock()
					c.gone = append(c.gone, key)
					c.goneMu.Unlock()
				}
			},
		}},
		{svc, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { c.on(func(ks keySet) { c.serviceKeys(ks, o) }) },
			UpdateFunc: func(_, cur any) { c.on(func(ks keySet) { c.serviceKeys(ks, cur) }) },
			DeleteFunc: func(o any) { c.on(func(ks keySet) { c.serviceKeys(ks, o) }) },
		}},
		{slices, cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { c.indexAddresses(nil, o); c.on(func(ks keySet) { c.sliceKeys(ks, o) }) },
			UpdateFunc: func(old, cur any) {
				c.indexAddresses(old, cur)
				c.on(func(ks keySet) {
					c.sliceKeys(ks, old)
					c.sliceKeys(ks, cur)
				})
			},
			DeleteFunc: func(o any) { c.indexAddresses(o, nil); c.on(func(ks keySet) { c.sliceKeys(ks, o) }) },
		}},
		{nodes, cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { c.on(func(ks keySet) { c.nodeKeys(ks, o) }) },
			UpdateFunc: func(old, cur any) {
				if nodeChanged(old, cur) {
					c.on(func(ks keySet) { c.nodeKeys(ks, cur) })
				}
			},
			DeleteFunc: func(o any) { c.on(func(ks keySet) { c.nodeKeys(ks, o) }) },
		}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return err
		}
	}
	return nil
}

// indexAddresses moves a slice's addresses in the address index from
// old to cur (nil or a tombstone's final state as they come).
func (c *Controller) indexAddresses(old, cur any) {
	o, _ := controller.As[*discoveryv1.EndpointSlice](old)
	n, _ := controller.As[*discoveryv1.EndpointSlice](cur)
	c.addrs.update(o, n)
}

// sliceService returns the "namespace/service" of the slice "namespace/name"
// and its service's name, when the slice is cached.
func (c *Controller) sliceService(key string) (svcKey, ns, name string, ok bool) {
	ns, sliceName, _ := strings.Cut(key, "/")
	s, err := c.sliceLister.EndpointSlices(ns).Get(sliceName)
	if err != nil {
		return "", "", "", false
	}
	name = s.Labels[discoveryv1.LabelServiceName]
	return ns + "/" + name, ns, name, true
}

// hostKeys are the keys an EgressService's rows live under.
func (c *Controller) hostKeys(es *egressv1.EgressService) []translate.Key {
	var keys []translate.Key
	if c.cfg.Translate.UnassignedTraffic == translate.UnassignedDrop {
		keys = append(keys, translate.UnassignedKey)
	}
	switch h := es.Status.Host; h {
	case "":
	case egressv1.HostAll:
		// Network mode: every node that has an endpoint of the service.
		for _, n := range c.endpointNodes(translate.EgressServiceKey(es)) {
			keys = append(keys, translate.NodeKey(n))
		}
	default:
		keys = append(keys, translate.NodeKey(h))
	}
	return keys
}

func (c *Controller) endpointNodes(svcKey string) []string {
	slices, _ := c.slicesOf(svcKey)
	seen := map[string]bool{}
	var out []string
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.NodeName != nil && !seen[*e.NodeName] {
				seen[*e.NodeName] = true
				out = append(out, *e.NodeName)
			}
		}
	}
	return out
}

func (c *Controller) egressServiceKeys(ks keySet, o any) {
	if es, ok := controller.As[*egressv1.EgressService](o); ok {
		ks.add(c.hostKeys(es)...)
		key := translate.EgressServiceKey(es)
		slices, _ := c.slicesOf(key)
		c.sharingKeys(ks, key, slices)
	}
}

// sharingKeys adds the hosts of the EgressServices other than svcKey's
// whose slices hold an address of these slices (svcKey's, now or as they
// were): which of them reroutes a shared address depends on all of them —
// also when the address has just left one of them, and another alone
// holds it now.
func (c *Controller) sharingKeys(ks keySet, svcKey string, slices []*discoveryv1.EndpointSlice) {
	for _, s := range slices {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				for _, sk := range c.addrs.slices(a) {
					other, ns, name, ok := c.sliceService(sk)
					if !ok || other == svcKey {
						continue
					}
					if es, err := c.esLister.EgressServices(ns).Get(name); err == nil {
						ks.add(c.hostKeys(es)...)
					}
				}
			}
		}
	}
}

func (c *Controller) serviceKeys(ks keySet, o any) {
	s, ok := controller.As[*corev1.Service](o)
	if !ok {
		return
	}
	c.services.markDirty(s.Namespace + "/" + s.Name)
	es, err := c.esLister.EgressServices(s.Namespace).Get(s.Name)
	if err != nil {
		return // no EgressService for this Service
	}
	ks.add(c.hostKeys(es)...)
	key := s.Namespace + "/" + s.Name
	slices, _ := c.slicesOf(key)
	c.sharingKeys(ks, key, slices)
}

func (c *Controller) sliceKeys(ks keySet, o any) {
	s, ok := controller.As[*discoveryv1.EndpointSlice](o)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	c.services.markDirty(s.Namespace + "/" + name)
	es, err := c.esLister.EgressServices(s.Namespace).Get(name)
	if err != nil {
		return
	}
	ks.add(c.hostKeys(es)...)
	if es.Status.Host == egressv1.HostAll {
		// The slice's own nodes: an endpoint that left a node leaves its set.
		for _, e := range s.Endpoints {
			if e.NodeName != nil {
				ks.add(translate.NodeKey(*e.NodeName))
			}
		}
	}
	// The slice as given (the old one of an update too): an address it
	// held and no longer holds may now be another service's alone.
	c.sharingKeys(ks, s.Namespace+"/"+name, []*discoveryv1.EndpointSlice{s})
}

func (c *Controller) nodeKeys(ks keySet, o any) {
	if n, ok := controller.As[*corev1.Node](o); ok {
		c.nodeNameKeys(ks, n.Name)
	}
}

// nodeNameKeys are the keys a change of node's annotations or report dirties.
func (c *Controller) nodeNameKeys(ks keySet, node string) {
	ks.add(translate.NodeKey(node), translate.ClusterKey)
	if c.cfg.Translate.UnassignedTraffic == translate.UnassignedDrop {
		ks.add(translate.UnassignedKey)
	}
}

// reportHandler dirties the node whose report ConfigMap changed.
func (c *Controller) reportHandler() cache.ResourceEventHandler {
	keys := func(o any) {
		if cm, ok := controller.As[*corev1.ConfigMap](o); ok && cm.Data[translate.ReportNodeKey] != "" {
			c.on(func(ks keySet) { c.nodeNameKeys(ks, cm.Data[translate.ReportNodeKey]) })
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: keys,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.ConfigMap)
			n, ok2 := cur.(*corev1.ConfigMap)
			if !ok1 || !ok2 || !maps.Equal(o.Data, n.Data) {
				keys(cur)
			}
		},
		DeleteFunc: keys,
	}
}

// nodeChanged reports the Node changes translation reads: annotations
// (subnets, join and transit addresses, gateway mode, zone, the agent's
// readiness report) and addresses (the node-IP sets). Labels and readiness
// are host selection's business (it writes status.host, which dirties the
// hosts); ignoring them keeps the label patches of a drain — one per host
// that gained or lost services — from re-translating those hosts.
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

// nbHandler maps NB cache events to keys: GR ports (join IPs, NAT
// announcement), routers appearing, and any change to an owned row (so rows
// removed or edited by someone else are put back) — except an address set
// left as the worker wants it, its own write's echo above all (wantedSets).
func (c *Controller) nbHandler() libcache.EventHandler {
	onRow := func(m model.Model, deleted bool) {
		if ids, ok := ovn.NATExternalIDs(m); ok { // either NAT model
			c.enqueueOwned(ids)
			return
		}
		switch r := m.(type) {
		case *nbdb.AddressSet:
			if (deleted && c.wanted.isWanted(r)) || (!deleted && !c.wanted.asWanted(r)) {
				c.enqueueOwned(r.ExternalIDs)
			}
		case *nbdb.LogicalRouterPolicy:
			if c.cfg.Zone != "" && r.ExternalIDs[translate.KeyOwnerController] != translate.OwnerController && r.ExternalIDs[translate.KeyOwnerType] == "EgressIP" && strings.HasPrefix(r.ExternalIDs[translate.KeyName], "EIP-No-Reroute") {
				// ovn-kubernetes' EgressIP came or went: who keeps the
				// zone's cluster routes changes (Input.ClusterRouteShared).
				c.enqueueNodes()
				return
			}
			c.enqueueOwned(r.ExternalIDs)
		case *nbdb.LogicalRouterStaticRoute:
			if _, ours := translate.KeyOf(r.ExternalIDs); !ours && c.cfg.Zone != "" && c.isClusterRoute(r) {
				// Someone else's cluster src-ip route came or went: the
				// zone's own is needed exactly while there is none
				// (Input.ForeignClusterRoutes) — not only at the next resync.
				c.enqueueNodes()
				return
			}
			c.enqueueOwned(r.ExternalIDs) // drift of an owned route (a cluster route) is put back
		case *nbdb.LogicalRouterPort:
			if gr, ok := strings.CutPrefix(r.Name, "rtoj-"); ok {
				c.enqueueGR(gr)
			}
		case *nbdb.LogicalSwitchPort:
			if gr, ok := strings.CutPrefix(r.Name, "etor-"); ok {
				c.enqueueGR(gr)
			}
		case *nbdb.LogicalRouter:
			if r.Name == translate.ClusterRouter {
				c.enqueueNodes()
			} else {
				c.enqueueGR(r.Name)
			}
		}
	}
	return &libcache.EventHandlerFuncs{
		AddFunc: func(_ string, m model.Model) { onRow(m, false) },
		UpdateFunc: func(_ string, old, cur model.Model) {
			if lr, ok := cur.(*nbdb.LogicalRouter); ok {
				// Routers change whenever a policy or NAT row is attached;
				// only a rename matters.
				if o, ok := old.(*nbdb.LogicalRouter); ok && o.Name == lr.Name {
					return
				}
			}
			onRow(cur, false)
		},
		DeleteFunc: func(_ string, m model.Model) { onRow(m, true) },
	}
}

// isClusterRoute reports whether r is a src-ip route of one of the
// cluster subnets (who routes the zone's traffic to its gateway router).
func (c *Controller) isClusterRoute(r *nbdb.LogicalRouterStaticRoute) bool {
	if r.Policy == nil || *r.Policy != nbdb.LogicalRouterStaticRoutePolicySrcIP {
		return false
	}
	p, err := netip.ParsePrefix(r.IPPrefix)
	if err != nil {
		return false
	}
	for _, s := range c.cfg.Translate.ClusterSubnets {
		if p.Masked() == s.Masked() {
			return true
		}
	}
	return false
}

func (c *Controller) enqueueOwned(ids map[string]string) {
	if k, ok := translate.KeyOf(ids); ok {
		c.enqueueKey(k)
	}
}

func (c *Controller) enqueueGR(name string) {
	if node, ok := strings.CutPrefix(name, "GR_"); ok {
		c.add(translate.NodeKey(node))
	}
}
