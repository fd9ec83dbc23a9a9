package testenv

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Helpers that write the cluster objects ovn-egress reads into a real API
// server, as ovn-kubernetes, MetalLB and the EndpointSlice controller would.

func ctx30() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// CreateNodes creates the topology's Node objects (Ready, with the
// ovn-kubernetes annotations) and deletes them when t ends.
func (k *Kube) CreateNodes(t testing.TB, topo Topology) {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	for _, n := range topo.Nodes {
		obj := topo.NodeObject(n)
		created, err := k.Client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create node %s: %v", n.Name, err)
		}
		created.Status = obj.Status
		if _, err := k.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("node %s status: %v", n.Name, err)
		}
		name := n.Name
		t.Cleanup(func() {
			_ = k.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
			// No garbage collector runs here to follow the report's owner.
			_ = k.Client.CoreV1().ConfigMaps(ReportNamespace).DeleteCollection(context.Background(), metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: translate.ReportNodeLabel + "=" + translate.ReportNodeHash(name)})
		})
	}
}

// CreateLoadBalancer creates a LoadBalancer Service with ingress IPs written
// through /status, and its EndpointSlices ("ip@node" endpoints).
func (k *Kube) CreateLoadBalancer(t testing.TB, ns, name string, ingress []string, eps ...string) *corev1.Service {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	want := LoadBalancerService(ns, name, ingress...)
	svc, err := k.Client.CoreV1().Services(ns).Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	svc.Status = want.Status
	if svc, err = k.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("service status: %v", err)
	}
	k.SetEndpoints(t, ns, name, eps...)
	return svc
}

// SetEndpoints creates or replaces the Service's EndpointSlices.
func (k *Kube) SetEndpoints(t testing.TB, ns, name string, eps ...string) {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	api := k.Client.DiscoveryV1().EndpointSlices(ns)
	for _, s := range EndpointSlices(ns, name, eps...) {
		cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, s, metav1.CreateOptions{})
		case err == nil:
			s.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, s, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("endpointslice %s: %v", s.Name, err)
		}
	}
	// A family whose endpoints all went away keeps an empty slice.
	for _, fam := range []string{"ipv4", "ipv6"} {
		sname := name + "-" + fam
		found := false
		for _, s := range EndpointSlices(ns, name, eps...) {
			found = found || s.Name == sname
		}
		if found {
			continue
		}
		cur, err := api.Get(ctx, sname, metav1.GetOptions{})
		if err == nil {
			cur.Endpoints = nil
			if _, err := api.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("empty endpointslice %s: %v", sname, err)
			}
		}
	}
}

// SetHost creates the EgressService if needed and writes status.host
// through the status subresource.
func (k *Kube) SetHost(t testing.TB, ns, name, host string, mutate ...func(*egressv1.EgressService)) *egressv1.EgressService {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	api := k.Egress.K8sV1().EgressServices(ns)
	es, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		want := EgressService(ns, name, host)
		for _, m := range mutate {
			m(want)
		}
		es, err = api.Create(ctx, want, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("egressservice %s/%s: %v", ns, name, err)
	}
	es.Status.Host = host
	// As ovn-egress's host selection writes it: a host chosen before (by
	// another field manager, the master would hold the service, coexist).
	es, err = api.UpdateStatus(ctx, es, metav1.UpdateOptions{FieldManager: "ovn-egress-selection"})
	if err != nil {
		t.Fatalf("egressservice %s/%s status: %v", ns, name, err)
	}
	return es
}

// ReportNamespace is where the tests' agents keep their readiness reports
// (the manifests' namespace).
const ReportNamespace = "ovn-egress"

// SetReport writes a node agent's readiness report, as the agent does: its
// first ConfigMap in ReportNamespace (a report this small has one part).
func (k *Kube) SetReport(t testing.TB, node string, r translate.Report) {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	_, _ = k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ReportNamespace}}, metav1.CreateOptions{})
	name, err := translate.ReportConfigMapName(node)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ReportNamespace,
		Labels: map[string]string{translate.ReportLabel: "", translate.ReportNodeLabel: translate.ReportNodeHash(node)}},
		Data: map[string]string{translate.ReportNodeKey: node, translate.ReportDataKey: r.Encode()}}
	cms := k.Client.CoreV1().ConfigMaps(ReportNamespace)
	if _, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("report of %s: %v", node, err)
	}
}

// SetLegacyReport writes a readiness report where agents of older releases
// did: the Node's annotation.
func (k *Kube) SetLegacyReport(t testing.TB, node string, r translate.Report) {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{translate.ReportAnnotation: r.Encode()}}})
	if _, err := k.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("report on %s: %v", node, err)
	}
}

// DeleteReport removes node's first report ConfigMap.
func (k *Kube) DeleteReport(t testing.TB, node string) {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	name, _ := translate.ReportConfigMapName(node)
	if err := k.Client.CoreV1().ConfigMaps(ReportNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete the report of %s: %v", node, err)
	}
}

// ReportFor computes the report an agent on node would publish for the
// EgressService ns/name as it now is in the API server.
func (k *Kube) ReportFor(t testing.TB, node, ns, name string, clusterSubnets []netip.Prefix) translate.ServiceReport {
	t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	es, err := k.Egress.K8sV1().EgressServices(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := k.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := k.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var slices []*discoveryv1.EndpointSlice
	for i := range list.Items {
		slices = append(slices, &list.Items[i])
	}
	eps := translate.ServiceEndpoints(svc, slices, clusterSubnets)
	ingress, _ := translate.IngressIPs(svc)
	r := translate.ServiceReport{Network: es.Spec.Network, Endpoints: translate.EndpointsHash(translate.AgentEndpoints(es.Status.Host, node, eps, ingress))}
	if es.Status.Host != translate.HostAll {
		r.IngressIPs = translate.ReportIPs(ingress)
	}
	return r
}
