package master_test

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// tenant is a namespace tenant's EgressService client (Kubernetes' edit
// role plus the shipped tenant role, nothing else).
func tenant(t *testing.T, ns string) versioned.Interface {
	t.Helper()
	rc, err := kube.TenantConfig(context.Background(), ns, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := versioned.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// warningOn waits for a Warning Event of reason on EgressService ns/name
// whose message holds every one of want.
func (c *cluster) warningOn(ns, name, reason string, want ...string) {
	c.t.Helper()
	saved := c.ns
	c.ns = ns
	defer func() { c.ns = saved }()
	c.warningEvent(name, reason, want...)
}

// setIngress is the load-balancer controller handing ns/name a new IP.
func setIngress(t *testing.T, ns, name, ip string) {
	t.Helper()
	ctx := context.Background()
	svc, err := kube.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if _, err := kube.Client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestTenantIngressIPsRefused: tenants of two namespaces, with only the
// rights docs/security.md gives a tenant, write EgressServices. When the
// load-balancer controller hands both namespaces' Services the same IP
// (a shared MetalLB pool), neither is hosted — the one hosted before the
// other namespace's EgressService came loses its host — and both say why
// (IngressIPShared) — no tenant leaves with the other's identity — until
// one gets another IP, when both are hosted. A Service whose ingress IP is
// a node's own address or inside the cluster subnets is never hosted
// (InvalidIngressIP). A tenant cannot write status.host.
func TestTenantIngressIPsRefused(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	nsB := kube.Namespace(t)
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(nsB).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	cfg := c.config("ovn-egress-master") // the Lease the dist RBAC names
	cfg.Translation.Translate.AssumeAgentsReady = true
	cfg.Select = selection.Config{HealthInterval: 0, Prober: allReachable{}}
	c.start(cfg, saConfig(t))

	a, b := tenant(t, c.ns), tenant(t, nsB)
	create := func(cs versioned.Interface, ns, name string) {
		t.Helper()
		if _, err := cs.K8sV1().EgressServices(ns).Create(ctx, testenv.EgressService(ns, name, ""), metav1.CreateOptions{}); err != nil {
			t.Fatalf("tenant of %s creates EgressService %s: %v", ns, name, err)
		}
	}
	host := func(ns, name string) string {
		es, err := kube.Egress.K8sV1().EgressServices(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return es.Status.Host
	}
	members := func() string {
		var all []string
		for _, n := range c.topo.Nodes {
			all = append(all, c.setAddresses(n.Name))
		}
		return strings.Join(all, " ")
	}

	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.CreateLoadBalancer(t, nsB, "web", []string{"172.18.0.100"}, "10.244.2.5@node2")
	// The second namespace's EgressService comes after the first is
	// hosted: the first loses its host (its own objects did not change).
	create(a, c.ns, "web")
	c.eventually("the first namespace's service hosted", func() bool {
		return host(c.ns, "web") != "" && strings.Contains(members(), "10.244.1.5")
	})
	create(b, nsB, "web")
	c.warningOn(c.ns, "web", string(translate.ReasonIngressIPShared), "172.18.0.100", nsB+"/web")
	c.warningOn(nsB, "web", string(translate.ReasonIngressIPShared), "172.18.0.100", c.ns+"/web")
	if ha, hb := host(c.ns, "web"), host(nsB, "web"); ha != "" || hb != "" {
		t.Errorf("an IP of two namespaces is hosted: %q and %q", ha, hb)
	}
	if m := members(); strings.Contains(m, "10.244.1.5") || strings.Contains(m, "10.244.2.5") {
		t.Errorf("an IP of two namespaces has rows: %s", m)
	}

	// The second namespace gets its own IP: both are hosted.
	setIngress(t, nsB, "web", "172.18.0.101")
	c.eventually("both hosted once the IP is no longer shared", func() bool {
		m := members()
		return host(c.ns, "web") != "" && host(nsB, "web") != "" && strings.Contains(m, "10.244.1.5") && strings.Contains(m, "10.244.2.5")
	})

	// Addresses no pod may leave with.
	node2 := c.topo.Node("node2").HostIPs[0].Addr().String()
	kube.CreateLoadBalancer(t, c.ns, "nodeip", []string{node2}, "10.244.1.6@node1")
	create(a, c.ns, "nodeip")
	c.warningOn(c.ns, "nodeip", string(translate.ReasonInvalidIngressIP), node2+" is node node2's own address")
	kube.CreateLoadBalancer(t, c.ns, "podip", []string{"10.244.3.3"}, "10.244.1.7@node1")
	create(a, c.ns, "podip")
	c.warningOn(c.ns, "podip", string(translate.ReasonInvalidIngressIP), "10.244.3.3 is inside the cluster subnet")
	if hn, hp := host(c.ns, "nodeip"), host(c.ns, "podip"); hn != "" || hp != "" {
		t.Errorf("refused ingress IPs are hosted: %q, %q", hn, hp)
	}
	if m := members(); strings.Contains(m, "10.244.1.6") || strings.Contains(m, "10.244.1.7") {
		t.Errorf("refused ingress IPs have rows: %s", m)
	}

	// The tenant role never writes status.
	es, err := a.K8sV1().EgressServices(c.ns).Get(ctx, "nodeip", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Status.Host = "node1"
	if _, err := a.K8sV1().EgressServices(c.ns).UpdateStatus(ctx, es, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant wrote status.host: %v", err)
	}
}

// TestTenantHostLabelCollision: the host label of X-a/web and of X/a-web
// is one label, and the load-balancer announcer follows it. A tenant that
// creates the colliding name later is refused (NodeLabelCollision) and takes
// neither the label nor the host from the service that had them; once that
// one is gone, the later one is hosted.
func TestTenantHostLabelCollision(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	nsB := c.ns + "-a"
	if _, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsB}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// With no namespace controller the namespace stays Terminating and
		// its EgressService (hosted on node2) would stay in the world the
		// package's later tests share.
		_ = kube.Egress.K8sV1().EgressServices(nsB).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = kube.Client.CoreV1().Namespaces().Delete(context.Background(), nsB, metav1.DeleteOptions{})
	})
	label := hosts.NodeLabel(c.ns, "a-web")
	if label != hosts.NodeLabel(nsB, "web") {
		t.Fatalf("no collision: %s", label)
	}
	cfg := c.config("ovn-egress-master")
	cfg.Translation.Translate.AssumeAgentsReady = true
	cfg.Select = selection.Config{HealthInterval: 0, Prober: allReachable{}}
	c.start(cfg, saConfig(t))
	a, b := tenant(t, c.ns), tenant(t, nsB)
	host := func(ns, name string) string {
		es, err := kube.Egress.K8sV1().EgressServices(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return es.Status.Host
	}
	labelled := func() []string {
		nodes, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: label})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range nodes.Items {
			out = append(out, n.Name)
		}
		return out
	}

	// The victim, pinned to node1.
	kube.CreateLoadBalancer(t, c.ns, "a-web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	victim := testenv.EgressService(c.ns, "a-web", "")
	victim.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node1"}}
	if _, err := a.K8sV1().EgressServices(c.ns).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the first service hosted and labelled on node1", func() bool {
		l := labelled()
		return host(c.ns, "a-web") == "node1" && len(l) == 1 && l[0] == "node1"
	})

	// The colliding name, a second later, wanting node2.
	time.Sleep(time.Second) // creationTimestamp has whole seconds
	kube.CreateLoadBalancer(t, nsB, "web", []string{"172.18.0.101"}, "10.244.2.5@node2")
	attacker := testenv.EgressService(nsB, "web", "")
	attacker.Spec.NodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node2"}}
	if _, err := b.K8sV1().EgressServices(nsB).Create(ctx, attacker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.warningOn(nsB, "web", string(hosts.ReasonNodeLabelCollision), label, c.ns+"/a-web, which holds it")
	if h := host(nsB, "web"); h != "" {
		t.Errorf("the colliding service is hosted on %q", h)
	}
	if l := labelled(); host(c.ns, "a-web") != "node1" || len(l) != 1 || l[0] != "node1" {
		t.Errorf("after the collision: the first service's host %q, label on %v; want node1 alone", host(c.ns, "a-web"), l)
	}

	// The first one goes: the later one is hosted, the label moves with it.
	if err := a.K8sV1().EgressServices(c.ns).Delete(ctx, "a-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the later service hosted and labelled on node2", func() bool {
		l := labelled()
		return host(nsB, "web") == "node2" && len(l) == 1 && l[0] == "node2"
	})
}

// TestTenantServicesCappedPerNode: with --max-services-per-node 1 on three
// nodes, a tenant's fourth EgressService waits (NoEligibleNode naming the
// cap) instead of adding a second label to a Node; when one of the first
// three goes, the fourth takes its place.
func TestTenantServicesCappedPerNode(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	cfg := c.config("ovn-egress-master")
	cfg.Translation.Translate.AssumeAgentsReady = true
	cfg.Select = selection.Config{HealthInterval: 0, Prober: allReachable{}, MaxPerNode: 1}
	c.start(cfg, saConfig(t))
	a := tenant(t, c.ns)
	names := []string{"s1", "s2", "s3", "s4"}
	for i, name := range names {
		kube.CreateLoadBalancer(t, c.ns, name, []string{fmt.Sprintf("172.18.0.%d", 100+i)}, fmt.Sprintf("10.244.1.%d@node1", 5+i))
		if _, err := a.K8sV1().EgressServices(c.ns).Create(ctx, testenv.EgressService(c.ns, name, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			c.eventually("three services hosted, one per node", func() bool {
				hosts := map[string]bool{}
				for _, n := range names[:3] {
					if h := c.host(n); h != "" {
						hosts[h] = true
					}
				}
				return len(hosts) == 3
			})
		}
	}
	c.warningOn(c.ns, "s4", string(translate.ReasonNoEligibleNode), "every candidate already hosts 1 EgressServices, the cap")
	if h := c.host("s4"); h != "" {
		t.Errorf("the fourth service is hosted on %s past the cap", h)
	}
	nodes, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		own := 0
		for k := range n.Labels {
			if strings.HasPrefix(k, "egress-service.k8s.ovn.org/"+c.ns) {
				own++
			}
		}
		if own > 1 {
			t.Errorf("node %s has %d of the namespace's host labels, want at most 1", n.Name, own)
		}
	}
	freed := c.host("s1")
	if err := a.K8sV1().EgressServices(c.ns).Delete(ctx, "s1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually("the fourth service hosted where the first was", func() bool { return c.host("s4") == freed })
}
