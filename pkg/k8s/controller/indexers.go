package controller

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// The indexers the controllers share, one set of names for every
// controller on the same informers.
const (
	// IndexByHost indexes EgressServices by status.host ("" included).
	IndexByHost = "ovn-egress.byHost"
	// IndexByService indexes EndpointSlices by "namespace/service".
	IndexByService = "ovn-egress.byService"
	// IndexByIngressIP indexes Services by every load-balancer ingress IP
	// (canonical form).
	IndexByIngressIP = "ovn-egress.byIngressIP"
	// IndexByHostLabel indexes EgressServices by the node label their host
	// carries (translate.NodeLabel): two of them with one label collide.
	IndexByHostLabel = "ovn-egress.byHostLabel"
	// IndexByReportNode indexes the agents' report ConfigMaps by the node
	// they are for (translate.ReportNodeKey).
	IndexByReportNode = "ovn-egress.byReportNode"
)

// indexFunc is the shared indexer of that name.
func indexFunc(name string) (cache.IndexFunc, bool) {
	switch name {
	case IndexByHost:
		return byHost, true
	case IndexByService:
		return byService, true
	case IndexByIngressIP:
		return byIngressIP, true
	case IndexByHostLabel:
		return byHostLabel, true
	case IndexByReportNode:
		return byReportNode, true
	}
	return nil, false
}

func byHost(obj any) ([]string, error) {
	es, ok := obj.(*egressv1.EgressService)
	if !ok {
		return nil, nil
	}
	return []string{es.Status.Host}, nil
}

func byService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
}

func byIngressIP(obj any) ([]string, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, ipfamily.Canonical(ip).String())
		}
	}
	return out, nil
}

func byHostLabel(obj any) ([]string, error) {
	es, ok := obj.(*egressv1.EgressService)
	if !ok {
		return nil, nil
	}
	return []string{hosts.NodeLabel(es.Namespace, es.Name)}, nil
}

func byReportNode(obj any) ([]string, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Data[translate.ReportNodeKey] == "" {
		return nil, nil
	}
	return []string{cm.Data[translate.ReportNodeKey]}, nil
}

// addIndexersMu serializes AddIndexers in the process: client-go's
// GetIndexers returns its live map, which an AddIndexers of another
// controller on the same informer may be writing.
var addIndexersMu sync.Mutex

// AddIndexers adds the named shared indexers to inf, skipping those another
// controller on the same informer has added already. Controllers of one
// process (a node agent and its zone's translation, informer.Shared) add
// theirs side by side, possibly to a running informer; the look and the
// add are one step for all of them (addIndexersMu).
func AddIndexers(inf cache.SharedIndexInformer, names ...string) error {
	add := cache.Indexers{}
	for _, n := range names {
		f, ok := indexFunc(n)
		if !ok {
			return fmt.Errorf("no shared indexer %q", n)
		}
		add[n] = f
	}
	addIndexersMu.Lock()
	defer addIndexersMu.Unlock()
	for n := range inf.GetIndexer().GetIndexers() {
		delete(add, n)
	}
	if len(add) == 0 {
		return nil
	}
	if err := inf.AddIndexers(add); err != nil {
		return fmt.Errorf("indexers %v: %w", names, err)
	}
	return nil
}
