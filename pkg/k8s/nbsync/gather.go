package nbsync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// gather reads what translating keys needs from the listers and the NB
// cache: the EgressServices hosted on those nodes (and Network-mode ones),
// the EgressServices sharing an endpoint address with them (conflicts are
// decided across hosts), their Services and EndpointSlices, every Node, the
// GR facts of the nodes and the current members of the keys' address sets.
func (c *Controller) gather(ctx context.Context, keys []translate.Key) (translate.Input, error) {
	// Input.EndpointSlices stays empty: the parsed Endpoints are given.
	in := translate.Input{
		Config:  c.cfg.Translate,
		Only:    map[translate.Key]bool{},
		Current: map[string][]string{},
		Zone:    c.cfg.Zone,
	}
	all := false
	hosts := map[string]bool{egressv1.HostAll: true}
	for _, k := range keys {
		in.Only[k] = true
		switch k {
		case translate.UnassignedKey:
			// "rerouted nowhere" is a property of every service.
			all = all || c.cfg.Translate.UnassignedTraffic == translate.UnassignedDrop
		case translate.ClusterKey:
		default:
			hosts[k.Node()] = true
		}
	}
	seen := map[string]*egressv1.EgressService{}
	if all {
		list, err := c.esLister.List(labels.Everything())
		if err != nil {
			return in, err
		}
		for _, es := range list {
			seen[translate.EgressServiceKey(es)] = es
		}
	} else {
		for h := range hosts {
			objs, err := c.esIndexer.ByIndex(controller.IndexByHost, h)
			if err != nil {
				return in, fmt.Errorf("index egressservices by host: %w", err)
			}
			for _, o := range objs {
				es := o.(*egressv1.EgressService)
				seen[translate.EgressServiceKey(es)] = es
			}
		}
	}
	// Services sharing an endpoint address decide conflicts together: add
	// them until no new one appears. Only addresses in more than one slice
	// can join services (the slice handlers keep that set), so the usual
	// case, no shared address, costs nothing here.
	for grown := true; grown; {
		grown = false
		for _, addr := range c.shared.list() {
			objs, _ := c.sliceIndex.ByIndex(controller.IndexByAddress, addr)
			in := false
			for _, o := range objs {
				s := o.(*discoveryv1.EndpointSlice)
				if seen[s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]] != nil {
					in = true
				}
			}
			if !in {
				continue
			}
			for _, o := range objs {
				s := o.(*discoveryv1.EndpointSlice)
				name := s.Labels[discoveryv1.LabelServiceName]
				okey := s.Namespace + "/" + name
				if seen[okey] != nil {
					continue
				}
				if es, err := c.esLister.EgressServices(s.Namespace).Get(name); err == nil {
					seen[okey], grown = es, true
				}
			}
		}
	}
	// The worker alone gathers, and nothing keeps an Input after its sync:
	// the maps are reused, sparing a large sync their allocation.
	in.EgressServices = make([]*egressv1.EgressService, 0, len(seen))
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
	nodes, err := c.parsedNodes()
	if err != nil {
		return in, err
	}
	in.Nodes = nodes
	names := make([]string, 0, len(hosts))
	for h := range hosts {
		if h != egressv1.HostAll {
			names = append(names, h)
		}
	}
	return in, ovn.Facts(ctx, c.nb, &in, keys, names)
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
