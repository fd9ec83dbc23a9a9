package nbsync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// gather reads what translating keys needs from the listers and the NB
// cache: the EgressServices hosted on those nodes (and Network-mode ones),
// the EgressServices sharing an endpoint address with them (conflicts are
// decided across hosts), their Services and EndpointSlices, every Node, the
// GR facts of the nodes and the current members of the keys' address sets.
//
// With reuse, an EgressService whose result translation's Memo holds for
// the very objects it has now (its Service and endpoints clean in the
// service cache, its host and gateway the same) goes to Input.Kept and
// costs a few lookups: a drain then costs the services that moved, not every
// service of every host they moved onto. A service that shares an endpoint
// address with another is never kept.
//
// With reuse, a key in moved (dirtied by EgressServices moving on or off its
// host alone: dirt) is not walked: only its moved services are read, and its
// other services are kept by translation's Memo (Input.Unlisted).
func (c *Controller) gather(ctx context.Context, keys []translate.Key, moved map[translate.Key]map[string]bool, reuse bool) (translate.Input, error) {
	// Input.EndpointSlices stays empty: the parsed Endpoints are given.
	in := translate.Input{
		Config:  c.cfg.Translate,
		Only:    map[translate.Key]bool{},
		Current: map[string][]string{},
		Zone:    c.cfg.Zone,
	}
	all := false
	hosts := map[string]bool{egressv1.HostAll: true}
	var names []string
	for _, k := range keys {
		in.Only[k] = true
		switch k {
		case translate.UnassignedKey:
			// "rerouted nowhere" is a property of every service.
			all = all || c.cfg.Translate.UnassignedTraffic == translate.UnassignedDrop
		case translate.ClusterKey:
		default:
			names = append(names, k.Node())
			if moved[k] == nil {
				hosts[k.Node()] = true
			}
		}
	}
	nodes, err := c.parsedNodes()
	if err != nil {
		return in, err
	}
	in.Nodes = nodes
	if in.EgressNodes, err = c.egressNodes(); err != nil {
		return in, err
	}
	if err := ovn.Facts(ctx, c.nb, &in, keys, names); err != nil {
		return in, err
	}
	reuse = reuse && c.memo.Reuses(in)
	var movers []string // the moved services of the keys not walked
	for k, svcs := range moved {
		if !in.Only[k] {
			continue
		}
		if !reuse || all {
			hosts[k.Node()] = true
			continue
		}
		if in.Unlisted == nil {
			in.Unlisted = map[translate.Key]bool{}
		}
		in.Unlisted[k] = true
		for svc := range svcs {
			movers = append(movers, svc)
		}
	}
	// The found objects first, to size the maps (a drain's sync finds
	// thousands).
	var found [][]any
	n := 0
	if all {
		list, err := c.esLister.List(labels.Everything())
		if err != nil {
			return in, err
		}
		objs := make([]any, len(list))
		for i, es := range list {
			objs[i] = es
		}
		found, n = append(found, objs), len(objs)
	} else {
		for h := range hosts {
			objs, err := c.esIndexer.ByIndex(controller.IndexByHost, h)
			if err != nil {
				return in, fmt.Errorf("index egressservices by host: %w", err)
			}
			found, n = append(found, objs), n+len(objs)
		}
	}
	cs := newCandidates(n, reuse)
	for _, key := range movers {
		ns, name, _ := strings.Cut(key, "/")
		es, err := c.esLister.EgressServices(ns).Get(name)
		switch {
		case apierrors.IsNotFound(err): // deleted: its delete event walks its host
		case err != nil:
			return in, fmt.Errorf("get egressservice %s: %w", key, err)
		default:
			cs.put(cs.seen, key, es)
		}
	}
	for _, objs := range found {
		for _, o := range objs {
			es := o.(*egressv1.EgressService)
			if reuse {
				if key, ok := c.memo.KeyOf(es); ok {
					if e, clean := c.services.peek(key); clean {
						gw, gwOK := in.Gateways[es.Status.Host]
						if c.memo.Reusable(es, e.svc, e.eps, in.Nodes[es.Status.Host], gw, gwOK) {
							cs.put(cs.kept, key, es)
							continue
						}
					}
				}
			}
			cs.put(cs.seen, translate.EgressServiceKey(es), es)
		}
	}
	if err := cs.settle(func(ns, name string) (*egressv1.EgressService, error) {
		return c.esLister.EgressServices(ns).Get(name)
	}); err != nil {
		return in, err
	}
	seen, kept := cs.seen, cs.kept
	c.addSharing(seen, kept)
	// The worker alone gathers, and nothing keeps an Input after its sync:
	// the maps are reused, sparing a large sync their allocation.
	in.EgressServices = make([]*egressv1.EgressService, 0, len(seen))
	in.Kept = make([]*egressv1.EgressService, 0, len(kept))
	for _, es := range kept {
		in.Kept = append(in.Kept, es)
	}
	clear(c.scratch.services)
	clear(c.scratch.endpoints)
	clear(c.scratch.slices)
	in.Services, in.Endpoints, in.EndpointSlices = c.scratch.services, c.scratch.endpoints, c.scratch.slices
	for key, es := range seen {
		in.EgressServices = append(in.EgressServices, es)
		e, err := c.service(es.Namespace, es.Name)
		if err != nil {
			return in, err
		}
		if e.svc != nil {
			in.Services[key] = e.svc
			in.Endpoints[key] = e.eps
			in.EndpointSlices[key] = e.slices // for the addresses eps left out (MisplacedEndpoints)
		}
	}
	return in, nil
}

// candidates are the EgressServices a gather found, to translate (seen) or
// to keep (kept), by key. The host index is read once per host while the
// informer moves objects between hosts: a service that moved meanwhile can
// be found twice, as its old object and its new one. settle gives such a
// key its current object, translated afresh.
type candidates struct {
	seen, kept map[string]*egressv1.EgressService
	twice      []string
}

// newCandidates sizes the maps for n objects, most of them kept with reuse.
func newCandidates(n int, reuse bool) *candidates {
	if reuse {
		return &candidates{seen: map[string]*egressv1.EgressService{}, kept: make(map[string]*egressv1.EgressService, n)}
	}
	return &candidates{seen: make(map[string]*egressv1.EgressService, n), kept: map[string]*egressv1.EgressService{}}
}

// put adds es to m (seen or kept) unless its key was found before.
func (cs *candidates) put(m map[string]*egressv1.EgressService, key string, es *egressv1.EgressService) {
	if cs.seen[key] != nil || cs.kept[key] != nil {
		cs.twice = append(cs.twice, key)
		return
	}
	m[key] = es
}

// settle reads the keys found twice again with get (a lister's Get).
func (cs *candidates) settle(get func(ns, name string) (*egressv1.EgressService, error)) error {
	for _, key := range cs.twice {
		delete(cs.kept, key)
		ns, name, _ := strings.Cut(key, "/")
		es, err := get(ns, name)
		switch {
		case apierrors.IsNotFound(err):
			delete(cs.seen, key)
		case err != nil:
			return fmt.Errorf("get egressservice %s: %w", key, err)
		default:
			cs.seen[key] = es
		}
	}
	cs.twice = nil
	return nil
}

// addSharing adds to seen the EgressServices sharing an endpoint address
// with one in seen or kept, until no new one appears, and takes any such
// service out of kept: conflicts are decided among given services. Only
// addresses in more than one slice can join services (the slice handlers
// keep that set), so the usual case, no shared address, costs nothing here.
func (c *Controller) addSharing(seen, kept map[string]*egressv1.EgressService) {
	for grown := true; grown; {
		grown = false
		for _, addr := range c.addrs.shared() {
			type svc struct{ key, ns, name string }
			var svcs []svc
			in := false
			for _, sk := range c.addrs.slices(addr) {
				key, ns, name, ok := c.sliceService(sk)
				if !ok {
					continue
				}
				svcs = append(svcs, svc{key, ns, name})
				if seen[key] != nil || kept[key] != nil {
					in = true
				}
			}
			if !in {
				continue
			}
			for _, s := range svcs {
				okey, name := s.key, s.name
				if es := kept[okey]; es != nil {
					delete(kept, okey)
					seen[okey], grown = es, true
				}
				if seen[okey] != nil {
					continue
				}
				if es, err := c.esLister.EgressServices(s.ns).Get(name); err == nil {
					seen[okey], grown = es, true
				}
			}
		}
	}
}

func (c *Controller) slicesOf(svcKey string) ([]*discoveryv1.EndpointSlice, error) {
	objs, err := c.sliceIndex.ByIndex(controller.IndexByService, svcKey)
	if err != nil {
		return nil, fmt.Errorf("index endpointslices by service: %w", err)
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	return out, nil
}

// reports returns the report ConfigMaps by the node they are for, each
// node's by name.
func (c *Controller) reports() (map[string][]*corev1.ConfigMap, error) {
	if c.reportLister == nil {
		return nil, nil
	}
	list, err := c.reportLister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list report configmaps: %w", err)
	}
	out := make(map[string][]*corev1.ConfigMap, len(list))
	for _, cm := range list {
		if node := cm.Data[translate.ReportNodeKey]; node != "" {
			out[node] = append(out[node], cm)
		}
	}
	for _, cms := range out {
		slices.SortFunc(cms, func(a, b *corev1.ConfigMap) int { return strings.Compare(a.Name, b.Name) })
	}
	return out, nil
}

// parsedNodes parses every Node's annotations, reusing the previous parse
// while the Node is the same object (an informer replaces it on every
// change; translation's Memo relies on an unchanged Node giving the same
// NodeInfo).
func (c *Controller) parsedNodes() (map[string]*translate.NodeInfo, error) {
	list, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	reports, err := c.reports()
	if err != nil {
		return nil, err
	}
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	out := make(map[string]*translate.NodeInfo, len(list))
	fresh := make(map[string]parsedNode, len(list))
	for _, n := range list {
		p, ok := c.nodes[n.Name]
		if cm := reports[n.Name]; !ok || p.obj != n || !slices.Equal(p.report, cm) {
			p = parsedNode{obj: n, report: cm, info: translate.WithReports(translate.ParseNode(n, c.cfg.Translate.JoinSubnets), cm)}
		}
		fresh[n.Name] = p
		out[n.Name] = p.info
	}
	c.nodes = fresh
	return out, nil
}
