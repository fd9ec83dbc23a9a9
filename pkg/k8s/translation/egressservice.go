package translation

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	eiplisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/listers/egressip/v1"
	egresslisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/listers/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// egressServices is the EgressService translator: it gathers what its keys
// name from the listers and the NB cache into its translate.Index, which
// translates the EgressServices whose inputs changed and says which rows
// that touched.
type egressServices struct {
	cfg Config
	nb  client.Client
	x   *egressservice.Index

	esLister     egresslisters.EgressServiceLister
	svcLister    corelisters.ServiceLister
	sliceIndex   cache.Indexer
	nodeLister   corelisters.NodeLister
	reportLister corelisters.ConfigMapLister // nil: Node annotations only
	eipLister    eiplisters.EgressIPLister   // nil: no EgressIPs
}

// rowsPlan is what one translator wants written: the keys to converge and
// their rows.
type rowsPlan struct {
	keys    []translate.Key
	desired *translate.Desired
}

// newIndex starts the translator's Index afresh, for the NB's features.
func (e *egressServices) newIndex() {
	cfg := e.cfg.Translate
	cfg.NATMatch = ovn.FeaturesOf(e.nb).NATMatch
	e.x = egressservice.NewIndex(cfg, e.cfg.Zone, members{e.nb})
}

// members reads owned address sets' members from the NB cache.
type members struct{ nb client.Client }

func (m members) Members(set string) []string { return ovn.AddressSetMembers(m.nb, set) }

// sync gathers b into the Index and returns the rows to write: those of
// b's row keys and of every key the Index touched (all keys, and every key
// with owned rows in NB, for b.all). translated are the EgressServices
// translated again.
func (e *egressServices) sync(ctx context.Context, b batch) (plan rowsPlan, translated []string, err error) {
	if e.x == nil || ovn.FeaturesOf(e.nb).NATMatch != e.x.Config().NATMatch {
		e.newIndex() // the first sync, or an NB of another schema: everything afresh
		b.all = true
	}
	var keys []translate.Key
	if b.all {
		if keys, err = e.gatherAll(ctx); err != nil {
			return plan, nil, err
		}
	} else if err = e.gather(ctx, b); err != nil {
		return plan, nil, err
	}
	keys = append(keys, b.rows...)
	keys = append(keys, e.x.Touched()...)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return rowsPlan{keys: keys, desired: e.x.Rows(keys)}, e.x.Translated(), nil
}

// gather reads what b's keys name: the nodes (and their gateway routers)
// of its row keys, the zone's facts, its EgressServices.
func (e *egressServices) gather(ctx context.Context, b batch) error {
	var nodes []string
	for _, k := range b.rows {
		if k.IsNode() {
			nodes = append(nodes, k.Node())
		}
	}
	if len(nodes) > 0 {
		reports, err := e.reports()
		if err != nil {
			return err
		}
		for _, name := range nodes {
			n, err := e.nodeLister.Get(name)
			switch {
			case apierrors.IsNotFound(err):
				e.x.SetNode(name, nil)
			case err != nil:
				return fmt.Errorf("get node %s: %w", name, err)
			default:
				e.x.SetNode(name, e.parse(n, reports[name]))
			}
			// NB's members of its sets may have changed (drift, a write's
			// echo): what reads them is translated again.
			e.x.RefreshMembers(name)
		}
		e.gateways(ctx, nodes)
	}
	if err := e.zoneFacts(ctx); err != nil {
		return err
	}
	for _, key := range b.services {
		if err := e.setService(key); err != nil {
			return err
		}
	}
	return nil
}

// gatherAll reads everything again and returns every key to converge:
// every key with rows, and every key with owned rows in NB (swept when
// nobody wants them).
func (e *egressServices) gatherAll(ctx context.Context) ([]translate.Key, error) {
	nodes, err := e.nodeLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	reports, err := e.reports()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		e.x.SetNode(n.Name, e.parse(n, reports[n.Name]))
		seen[n.Name] = true
		names = append(names, n.Name)
	}
	for _, name := range e.x.Nodes() {
		if !seen[name] {
			e.x.SetNode(name, nil)
		}
	}
	e.gateways(ctx, names)
	if err := e.zoneFacts(ctx); err != nil {
		return nil, err
	}
	ess, err := e.esLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	clear(seen)
	for _, es := range ess {
		key := translate.EgressServiceKey(es)
		seen[key] = true
		objs, err := e.objects(es)
		if err != nil {
			return nil, err
		}
		e.x.SetService(objs)
	}
	for _, key := range e.x.Services() {
		if !seen[key] {
			e.x.DeleteService(key)
		}
	}
	owned, err := ovn.OwnedKeys(ctx, e.nb)
	if err != nil {
		return nil, err
	}
	keys := e.x.Keys()
	for _, k := range owned {
		if _, eip := k.EgressIP(); !eip {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// setService gives the Index an EgressService's objects as the listers
// have them now (or forgets it).
func (e *egressServices) setService(key string) error {
	ns, name, _ := strings.Cut(key, "/")
	es, err := e.esLister.EgressServices(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		e.x.DeleteService(key)
		return nil
	case err != nil:
		return fmt.Errorf("get egressservice %s: %w", key, err)
	}
	objs, err := e.objects(es)
	if err != nil {
		return err
	}
	e.x.SetService(objs)
	return nil
}

// objects are an EgressService's Service and EndpointSlices.
func (e *egressServices) objects(es *egressv1.EgressService) (egressservice.ServiceObjects, error) {
	objs := egressservice.ServiceObjects{EgressService: es}
	svc, err := e.svcLister.Services(es.Namespace).Get(es.Name)
	switch {
	case apierrors.IsNotFound(err):
		return objs, nil
	case err != nil:
		return objs, fmt.Errorf("get service %s/%s: %w", es.Namespace, es.Name, err)
	}
	objs.Service = svc
	list, err := e.sliceIndex.ByIndex(controller.IndexByService, es.Namespace+"/"+es.Name)
	if err != nil {
		return objs, fmt.Errorf("index endpointslices by service: %w", err)
	}
	objs.Slices = make([]*discoveryv1.EndpointSlice, 0, len(list))
	for _, o := range list {
		objs.Slices = append(objs.Slices, o.(*discoveryv1.EndpointSlice))
	}
	// The index hands them in no particular order; the endpoints of an
	// address listed twice take the first slice's node.
	slices.SortFunc(objs.Slices, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return objs, nil
}

// parse is what translation reads of a Node and its agent's report.
func (e *egressServices) parse(n *corev1.Node, reports []*corev1.ConfigMap) *translate.NodeInfo {
	return translate.WithReports(translate.ParseNode(n, e.cfg.Translate.JoinSubnets), reports)
}

// gateways reads the gateway routers of nodes from NB (gateway path only).
func (e *egressServices) gateways(ctx context.Context, nodes []string) {
	if e.cfg.Translate.Backend != translate.BackendOVN {
		return
	}
	gws := ovn.Gateways(ctx, e.nb, nodes, e.cfg.Translate.ClusterSubnets)
	for _, n := range nodes {
		gw, ok := gws[n]
		e.x.SetGateway(n, gw, ok)
	}
}

// zoneFacts reads an interconnect zone's facts (every sync: NB and the
// EgressIPs say them, not the keys).
func (e *egressServices) zoneFacts(ctx context.Context) error {
	if e.cfg.Zone == "" {
		return nil
	}
	var z egressservice.ZoneFacts
	var err error
	if z.ForeignClusterRoutes, err = ovn.ForeignClusterRoutes(ctx, e.nb, e.cfg.Translate.ClusterSubnets); err != nil {
		return err
	}
	if z.ClusterRouteShared, err = ovn.OVNKubeEgressIPActive(ctx, e.nb); err != nil {
		return err
	}
	if z.EgressNodes, err = e.egressNodes(); err != nil {
		return err
	}
	e.x.SetZoneFacts(z)
	return nil
}

// reports returns the report ConfigMaps by the node they are for, each
// node's by name.
func (e *egressServices) reports() (map[string][]*corev1.ConfigMap, error) {
	if e.reportLister == nil {
		return nil, nil
	}
	list, err := e.reportLister.List(labels.Everything())
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
