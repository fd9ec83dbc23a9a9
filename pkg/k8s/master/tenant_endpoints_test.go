package master_test

import (
	"context"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestTenantMirroredEndpointsRefused (issue 39.2): a tenant cannot write
// EndpointSlices (the edit role does not grant it), but on a cluster created
// before Kubernetes 1.22 its edit role writes Endpoints, which
// kube-controller-manager mirrors into a slice with any address in it — a
// pod of another namespace included. Such a slice (written here as the
// mirroring controller writes it) gives the tenant's EgressService no host
// and no rows, with an EndpointsMirrored Warning; the victim's pod stays in
// its own namespace's EgressService.
func TestTenantMirroredEndpointsRefused(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	victimNS := kube.Namespace(t)
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(victimNS).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	cfg := c.config("ovn-egress-master")
	cfg.Translation.Translate.AssumeAgentsReady = true
	cfg.Select = selection.Config{HealthInterval: 0, Prober: allReachable{}}
	c.start(cfg, saConfig(t))

	rc, err := kube.TenantConfig(ctx, c.ns, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	tk, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	thief := tenant(t, c.ns)
	victimPod := "10.244.2.5"

	// The victim's service is hosted with its pod.
	kube.CreateLoadBalancer(t, victimNS, "web", []string{"172.18.0.101"}, victimPod+"@node2")
	if _, err := kube.Egress.K8sV1().EgressServices(victimNS).Create(ctx, testenv.EgressService(victimNS, "web", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := func(ns, name string) string {
		es, err := kube.Egress.K8sV1().EgressServices(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return es.Status.Host
	}
	c.eventually("the victim's service hosted with its pod", func() bool {
		h := host(victimNS, "web")
		return h != "" && strings.Contains(c.setAddresses(h), victimPod)
	})
	victimHost := host(victimNS, "web")

	// The tenant's own EndpointSlice naming the victim's pod is forbidden.
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"})
	forged := testenv.EndpointSlices(c.ns, "web", victimPod+"@node2")[0]
	forged.Name = "web-forged"
	if _, err := tk.DiscoveryV1().EndpointSlices(c.ns).Create(ctx, forged, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant wrote an EndpointSlice: %v", err)
	}
	// The mirroring controller's slice of the tenant's Endpoints.
	mirrored := testenv.EndpointSlices(c.ns, "web", victimPod+"@node2")[0]
	mirrored.Name = "web-mirrored"
	mirrored.Labels[discoveryv1.LabelManagedBy] = translate.MirroringManager
	if _, err := kube.Client.DiscoveryV1().EndpointSlices(c.ns).Create(ctx, mirrored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := thief.K8sV1().EgressServices(c.ns).Create(ctx, testenv.EgressService(c.ns, "web", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.warningOn(c.ns, "web", string(translate.ReasonEndpointsMirrored), "web-mirrored", "mirrored from an Endpoints object")
	c.warningOn(c.ns, "web", string(translate.ReasonNoEndpoints))
	if h := host(c.ns, "web"); h != "" {
		t.Errorf("the tenant's service is hosted on %s", h)
	}
	if h := host(victimNS, "web"); h != victimHost || !strings.Contains(c.setAddresses(h), victimPod) {
		t.Errorf("the victim's pod left its service: host %q, members %s", h, c.setAddresses(h))
	}
	for _, n := range c.topo.Nodes {
		if n.Name != victimHost && strings.Contains(c.setAddresses(n.Name), victimPod) {
			t.Errorf("the victim's pod is rerouted through %s too", n.Name)
		}
	}
	evs, err := kube.Client.CoreV1().Events(victimNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == string(translate.ReasonSharedEndpoint) {
			t.Errorf("the victim's service shares its pod: %s", e.Message)
		}
	}
}
