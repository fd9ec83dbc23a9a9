package conformance

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// A dual-stack LoadBalancer Service gets ClusterIPs and node ports, and its
// status.loadBalancer.ingress is written only through /status and reaches an
// informer.
func TestLoadBalancerService(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	services := kube.Client.CoreV1().Services(ns)
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc, err := services.Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, IPFamilyPolicy: &policy,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var fams []corev1.IPFamily
	for _, ip := range svc.Spec.ClusterIPs {
		if a := netip.MustParseAddr(ip); a.Is4() {
			fams = append(fams, corev1.IPv4Protocol)
		} else {
			fams = append(fams, corev1.IPv6Protocol)
		}
	}
	if !slices.Equal(fams, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) || !slices.Equal(svc.Spec.IPFamilies, fams) {
		t.Errorf("ClusterIPs %v families %v; want one IPv4 then one IPv6", svc.Spec.ClusterIPs, svc.Spec.IPFamilies)
	}
	if np := svc.Spec.Ports[0].NodePort; np < 30000 || np > 32767 {
		t.Errorf("node port %d; want one allocated in 30000-32767", np)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(kube.Client, 0, informers.WithNamespace(ns))
	seen := make(chan []corev1.LoadBalancerIngress, 10)
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { seen <- obj.(*corev1.Service).Status.LoadBalancer.Ingress },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer factory.Shutdown() // waits for the informers, which stop on cancel
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	// Through the main resource the status is ignored.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.99"}}
	if svc, err = services.Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(svc.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("status via the main resource: ingress %v; want none", svc.Status.LoadBalancer.Ingress)
	}

	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {IP: "2001:db8::10"}}
	if _, err := services.UpdateStatus(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := services.Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := corev1.LoadBalancerIPModeVIP
	want := []corev1.LoadBalancerIngress{{IP: "192.0.2.10", IPMode: &vip}, {IP: "2001:db8::10", IPMode: &vip}}
	if !equalIngress(got.Status.LoadBalancer.Ingress, want) {
		t.Errorf("ingress %v; want both IPs with ipMode VIP", got.Status.LoadBalancer.Ingress)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ing := <-seen:
			if equalIngress(ing, want) {
				return
			}
		case <-deadline:
			t.Fatal("the informer saw no update with the ingress IPs")
		}
	}
}

func equalIngress(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool {
		return x.IP == y.IP && (x.IPMode == nil) == (y.IPMode == nil) && (x.IPMode == nil || *x.IPMode == *y.IPMode)
	})
}

// EndpointSlices keep their addresses, conditions and node names, and are
// found by the kubernetes.io/service-name label.
func TestEndpointSlices(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	sliceClient := kube.Client.DiscoveryV1().EndpointSlices(ns)
	yes, no := true, false
	node1, node2 := "node-1", "node-2"
	mk := func(name, service string, fam discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "conformance"}},
			AddressType: fam, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
		}
	}
	ready := discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}
	terminating := discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
	want := []*discoveryv1.EndpointSlice{
		mk("web-v4", "web", discoveryv1.AddressTypeIPv4,
			discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, Conditions: ready, NodeName: &node1},
			discoveryv1.Endpoint{Addresses: []string{"10.244.2.7"}, Conditions: terminating, NodeName: &node2}),
		mk("web-v6", "web", discoveryv1.AddressTypeIPv6,
			discoveryv1.Endpoint{Addresses: []string{"fd00:10:244:1::5"}, Conditions: ready, NodeName: &node1}),
		mk("other", "other", discoveryv1.AddressTypeIPv4,
			discoveryv1.Endpoint{Addresses: []string{"10.244.1.9"}, Conditions: ready, NodeName: &node1}),
	}
	for _, s := range want {
		if _, err := sliceClient.Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
	}
	list, err := sliceClient.List(t.Context(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			got = append(got, strings.Join([]string{s.Name, string(s.AddressType), e.Addresses[0], *e.NodeName,
				boolStr(*e.Conditions.Ready), boolStr(*e.Conditions.Serving), boolStr(*e.Conditions.Terminating)}, " "))
		}
	}
	if w := []string{
		"web-v4 IPv4 10.244.1.5 node-1 true true false",
		"web-v4 IPv4 10.244.2.7 node-2 false true true",
		"web-v6 IPv6 fd00:10:244:1::5 node-1 true true false",
	}; !slices.Equal(got, w) {
		t.Errorf("endpoints of service web:\n%q\nwant\n%q", got, w)
	}

	bad := mk("bad", "web", discoveryv1.AddressTypeIPv4, discoveryv1.Endpoint{Addresses: []string{"fd00::1"}})
	if _, err := sliceClient.Create(t.Context(), bad, metav1.CreateOptions{}); err == nil {
		t.Error("an IPv6 address in an IPv4 slice was accepted; want it refused")
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// Nodes keep labels and annotations; an EgressService nodeSelector selects
// them server-side; conditions and addresses are written through node
// /status only.
func TestNodes(t *testing.T) {
	t.Parallel()
	run := kube.Namespace(t) // nodes are cluster-scoped: a unique run label and name prefix
	nodes := kube.Client.CoreV1().Nodes()
	for name, l := range map[string]map[string]string{
		"a": {"egress": "yes", "zone": "a"},
		"b": {"egress": "yes", "zone": "b"},
		"c": {"zone": "a"},
		"d": {"egress": "yes", "zone": "a", "drained": "true"},
	} {
		l["run"] = run
		_, err := nodes.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: run + "-" + name, Labels: l,
			Annotations: map[string]string{
				"k8s.ovn.org/node-subnets":    `{"default":["10.244.1.0/24","fd00:10:244:1::/64"]}`,
				"k8s.ovn.org/node-chassis-id": "chassis-" + name,
			}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = nodes.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "run=" + run})
	})

	es := egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP, NodeSelector: metav1.LabelSelector{
		MatchLabels: map[string]string{"egress": "yes"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"b"}},
			{Key: "drained", Operator: metav1.LabelSelectorOpDoesNotExist}}}}
	sel, err := metav1.LabelSelectorAsSelector(&es.NodeSelector)
	if err != nil {
		t.Fatal(err)
	}
	runReq, _ := labels.NewRequirement("run", "=", []string{run})
	list, err := nodes.List(t.Context(), metav1.ListOptions{LabelSelector: sel.Add(*runReq).String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != run+"-a" ||
		list.Items[0].Annotations["k8s.ovn.org/node-subnets"] != `{"default":["10.244.1.0/24","fd00:10:244:1::/64"]}` {
		t.Errorf("nodes selected by %s: %v; want only %s-a with its annotations", sel, list.Items, run)
	}

	// Labels and annotations change through a merge patch of the node.
	name := run + "-b"
	n, err := nodes.Patch(t.Context(), name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"zone":"a"},"annotations":{"k8s.ovn.org/node-chassis-id":null}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations["k8s.ovn.org/node-chassis-id"]; n.Labels["zone"] != "a" || ok {
		t.Errorf("after the patch: labels %v annotations %v; want zone=a and no chassis id", n.Labels, n.Annotations)
	}

	// Status only through /status.
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "Main"}}
	if n, err = nodes.Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Conditions) != 0 {
		t.Errorf("conditions through the main resource: %v; want none", n.Status.Conditions)
	}
	status := `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":"2026-01-02T03:04:05Z"}],
		"addresses":[{"type":"InternalIP","address":"172.18.0.3"},{"type":"InternalIP","address":"fc00:f853:ccd:e793::3"}]}}`
	if n, err = nodes.Patch(t.Context(), name, types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, a := range n.Status.Addresses {
		addrs = append(addrs, a.Address)
	}
	if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Status != corev1.ConditionTrue ||
		!slices.Equal(addrs, []string{"172.18.0.3", "fc00:f853:ccd:e793::3"}) {
		t.Errorf("after the /status patch: conditions %v addresses %v", n.Status.Conditions, addrs)
	}
}
