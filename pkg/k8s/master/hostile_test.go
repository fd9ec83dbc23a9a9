package master_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/node"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// hostileSeed makes the run repeatable; a violation names it.
const hostileSeed = 20261202

// TestHostileObjectsThroughTheAPIServer writes random and malformed objects
// through the real API server: Services of every type and shape,
// EndpointSlices with odd addresses (IPv4-mapped IPv6, zone suffixes,
// addresses outside every node subnet, duplicates, FQDN slices, 1,000
// endpoints — the API's maximum per slice —, unknown nodes), EgressServices
// at the CRD's edges (bad selectors, networks no link can be called,
// garbage status.host), and Nodes whose ovn-kubernetes annotations are
// broken. A master runs on a real NB and node1's agent on the real kernel
// in a namespace of its own; the master trusts only the agent's readiness
// report (no agent is assumed ready). Throughout, a well-formed service
// hosted on node1 keeps its rows. Then: both are alive, healthy and ready
// (the agent's syncs are not failing), a new service on node1 still gets
// its rows while every hostile object is still there (so the agent keeps
// programming and reporting), every policy the master wrote references an
// address set that exists (no half-written transaction), problems became
// Warning Events, and once the bad objects are gone NB holds exactly the
// good services' rows and the agent's SNAT map nothing but theirs.
func TestHostileObjectsThroughTheAPIServer(t *testing.T) {
	c := newCluster(t)
	cfg := c.config("hostile")
	cfg.Observe = observe.New(observe.Config{}, testLogger(t))
	m, _ := c.start(cfg, kube.Config)
	ctx := context.Background()
	agent, agentNS := c.startAgent("node1")

	// A good service on node1, created without a status: the running
	// master chooses node1 and reroutes once node1's agent reports it.
	good := func(name, lb, ep string) {
		t.Helper()
		kube.CreateLoadBalancer(t, c.ns, name, []string{lb}, ep+"@node1")
		es := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node1"}}}}
		if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	good("good", "172.18.0.100", "10.244.1.5")
	c.eventually("the good service's rows", func() bool { return c.setAddresses("node1") == `["10.244.1.5"]` })

	rng := rand.New(rand.NewPCG(hostileSeed, 0))
	h := &hostile{t: t, ns: c.ns, rng: rng}
	origNodes := map[string]map[string]string{}
	for _, n := range c.topo.Nodes {
		obj, err := kube.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		origNodes[n.Name] = obj.Annotations
	}
	const objects = 600
	for i := range objects {
		switch rng.IntN(4) {
		case 0:
			h.service(i)
		case 1:
			h.slice(i)
		case 2:
			h.egressService(i)
		default:
			h.node(c.topo.Nodes[rng.IntN(len(c.topo.Nodes))].Name)
		}
	}
	t.Logf("seed %d: %d objects tried, %d accepted by the API server, %d refused (validation, or a name taken)", hostileSeed, h.tried, h.accepted, h.tried-h.accepted)

	c.eventually("the master idle after the hostile objects", func() bool {
		return m.Translation().Idle() && m.Select().Idle()
	})
	if err := cfg.Observe.Healthy(); err != nil {
		t.Errorf("not healthy after the hostile objects: %v", err)
	}
	agent.check(t, "after the hostile objects")
	c.checkPoliciesReferenceSets()
	// Events reach the API server through an asynchronous broadcaster:
	// wait for them rather than read once.
	reasons := map[string]int{}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		warnings, err := kube.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
		if err != nil {
			t.Fatal(err)
		}
		clear(reasons)
		for _, e := range warnings.Items {
			reasons[e.Reason]++
		}
		if len(reasons) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("Warning Events by reason: %v", reasons)
	if len(reasons) < 3 {
		t.Errorf("only %v Warning Events for %d hostile objects", reasons, h.accepted)
	}

	// The nodes' annotations return; every hostile object is still there
	// (EgressServices hosted on ALL with networks no link can be called
	// among them): node1's agent still programs and reports a new service.
	for name, ann := range origNodes {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": restore(ann)}})
		if _, err := kube.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	good("good2", "172.18.0.101", "10.244.1.6")
	// (node1's set may hold hostile services' endpoints too; theirs start
	// at .10.)
	c.eventually("the second good service's rows beside the hostile objects", func() bool {
		set := c.setAddresses("node1")
		return strings.Contains(set, `"10.244.1.5"`) && strings.Contains(set, `"10.244.1.6"`)
	})
	agent.check(t, "with the hostile objects in place")

	// Fix everything: the hostile objects go.
	for _, del := range []func() error{
		func() error {
			return kube.Egress.K8sV1().EgressServices(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "hostile=yes"})
		},
		func() error {
			return kube.Client.DiscoveryV1().EndpointSlices(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "hostile=yes"})
		},
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	svcs, err := kube.Client.CoreV1().Services(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "hostile=yes"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		if err := kube.Client.CoreV1().Services(c.ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// NB converges on the good services alone.
	c.eventually("NB back to the good services alone", func() bool {
		sets := c.ovn.MustNBCtl(t, "--bare", "--columns=addresses", "find", "Address_Set",
			"external_ids:k8s.ovn.org/owner-controller=ovn-egress", "external_ids:k8s.ovn.org/owner-type="+translate.OwnerHost)
		return c.setAddresses("node1") == `["10.244.1.5", "10.244.1.6"]` &&
			strings.Join(strings.Fields(sets), " ") == "10.244.1.5 10.244.1.6"
	})
	c.checkPoliciesReferenceSets()
	if err := cfg.Observe.Healthy(); err != nil {
		t.Errorf("not healthy at the end: %v", err)
	}
	agent.check(t, "at the end")
	c.eventually("node1's SNAT map holds only the good services", func() bool {
		out, err := agentNS.Run("nft", "list", "table", "inet", node.TableName)
		if err != nil {
			return false
		}
		for _, m := range nftComment.FindAllStringSubmatch(out, -1) {
			if strings.Contains(m[1], "/") && m[1] != c.ns+"/good" && m[1] != c.ns+"/good2" {
				return false
			}
		}
		return true
	})
}

var nftComment = regexp.MustCompile(`comment "([^"]*)"`)

// testAgent is a node agent run in process (as `ovn-egress node` runs it)
// with its kernel state in a namespace of its own.
type testAgent struct {
	obs  *observe.Server
	done chan error
}

// startAgent runs node's agent until the test ends.
func (c *cluster) startAgent(nodeName string) (*testAgent, *testenv.NetNS) {
	t := c.t
	netns := testenv.NewNetNS(t, "oe-hostile")
	rt := filepath.Join(t.TempDir(), "rt_tables")
	if err := os.WriteFile(rt, []byte("254 main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.NodeName, cfg.NetNS, cfg.RTTables = nodeName, netns.Name, rt
	cfg.ClusterSubnets = c.topo.ClusterSubnets
	cfg.WithdrawGrace = 200 * time.Millisecond
	cfg.FailingBound = 3 * time.Second // readiness says so when syncs keep failing
	a := &testAgent{obs: observe.New(observe.Config{}, testLogger(t)), done: make(chan error, 1)}
	cfg.Observe = a.obs
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		a.done <- node.RunAgent(ctx, cfg, kube.Client, kube.Egress, nil, testLogger(t).WithField("agent", nodeName))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-a.done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return a, netns
}

// check fails when the agent stopped or is not healthy and ready.
func (a *testAgent) check(t *testing.T, when string) {
	t.Helper()
	select {
	case err := <-a.done:
		t.Fatalf("the agent stopped %s: %v", when, err)
	default:
	}
	if err := errors.Join(a.obs.Healthy(), a.obs.IsReady()); err != nil {
		t.Errorf("agent %s: %v", when, err)
	}
}

// restore gives a merge patch that puts annotations back as they were:
// every key the hostile run may have added is cleared first.
func restore(orig map[string]string) map[string]any {
	out := map[string]any{}
	for _, k := range []string{translate.AnnotNodeSubnets, translate.AnnotHostCIDRs, "k8s.ovn.org/node-transit-switch-port-ifaddr",
		"k8s.ovn.org/zone-name", "k8s.ovn.org/node-gateway-router-lrp-ifaddr", "k8s.ovn.org/l3-gateway-config"} {
		out[k] = nil
	}
	for k, v := range orig {
		out[k] = v
	}
	return out
}

var setRef = regexp.MustCompile(`\$(a[0-9]+)`)

// checkPoliciesReferenceSets fails when an owned policy's match names an
// address set that does not exist: the trace of a half-written change.
func (c *cluster) checkPoliciesReferenceSets() {
	c.t.Helper()
	names := map[string]bool{}
	for _, n := range strings.Fields(c.ovn.MustNBCtl(c.t, "--bare", "--columns=name", "list", "Address_Set")) {
		names[n] = true
	}
	matches := c.ovn.MustNBCtl(c.t, "--bare", "--columns=match", "find", "Logical_Router_Policy", "external_ids:k8s.ovn.org/owner-controller=ovn-egress")
	for _, ref := range setRef.FindAllStringSubmatch(matches, -1) {
		if !names[ref[1]] {
			c.t.Errorf("an owned policy references address set %s, which does not exist", ref[1])
		}
	}
}

// hostile writes random objects; the API server's validation refuses some,
// which is counted, not a failure.
type hostile struct {
	t               *testing.T
	ns              string
	rng             *rand.Rand
	tried, accepted int
	services        []string
}

func (h *hostile) pick(xs ...string) string { return xs[h.rng.IntN(len(xs))] }

func (h *hostile) try(err error) {
	h.tried++
	if err == nil {
		h.accepted++
	}
}

func hostileMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: map[string]string{"hostile": "yes"}}
}

func (h *hostile) service(i int) {
	ctx := context.Background()
	name := fmt.Sprintf("h%d", i)
	svc := &corev1.Service{ObjectMeta: hostileMeta(name), Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	switch h.rng.IntN(4) {
	case 0:
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	case 1:
		svc.Spec.Type = corev1.ServiceTypeNodePort
	case 2:
		svc.Spec.Type, svc.Spec.Ports, svc.Spec.ExternalName = corev1.ServiceTypeExternalName, nil, "egress.example"
	default:
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		if h.rng.IntN(2) == 0 {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		if h.rng.IntN(3) == 0 {
			ipv6 := corev1.IPFamilyPolicyPreferDualStack
			svc.Spec.IPFamilyPolicy = &ipv6
		}
	}
	created, err := kube.Client.CoreV1().Services(h.ns).Create(ctx, svc, metav1.CreateOptions{})
	h.try(err)
	if err != nil {
		return
	}
	h.services = append(h.services, name)
	var ingress []corev1.LoadBalancerIngress
	for range h.rng.IntN(4) {
		ingress = append(ingress, corev1.LoadBalancerIngress{IP: h.pick("172.18.0.101", "172.18.0.101", "fd00:18::101", "", "::ffff:172.18.0.102"),
			Hostname: h.pick("", "", "lb.egress.example")})
	}
	created.Status.LoadBalancer.Ingress = ingress
	_, err = kube.Client.CoreV1().Services(h.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	h.try(err)
}

func (h *hostile) slice(i int) {
	owner := fmt.Sprintf("h%d", i)
	if len(h.services) > 0 && h.rng.IntN(4) > 0 {
		owner = h.services[h.rng.IntN(len(h.services))]
	}
	if h.rng.IntN(8) == 0 {
		owner = "good" // an extra slice for the good service: it stays its endpoints' union
	}
	typ := discoveryv1.AddressType(h.pick(string(discoveryv1.AddressTypeIPv4), string(discoveryv1.AddressTypeIPv6), string(discoveryv1.AddressTypeFQDN)))
	n := 1 + h.rng.IntN(6)
	if h.rng.IntN(15) == 0 {
		n = 1000
	}
	s := &discoveryv1.EndpointSlice{ObjectMeta: hostileMeta(fmt.Sprintf("h%d-slice", i)), AddressType: typ}
	s.Labels[discoveryv1.LabelServiceName] = owner
	for j := range n {
		addr := h.pick(fmt.Sprintf("10.244.%d.%d", 1+h.rng.IntN(3), 10+j%200), "10.99.0.7", "::ffff:10.244.1.9",
			"fd00:10:244:1::9", "fe80::9%eth0", "10.244.1.5", "pod.egress.example", fmt.Sprintf("10.244.2.%d", j%250))
		ep := discoveryv1.Endpoint{Addresses: []string{addr}}
		if node := h.pick("node1", "node2", "node3", "node9", ""); node != "" {
			ep.NodeName = &node
		}
		if h.rng.IntN(5) == 0 {
			f := false
			ep.Conditions.Ready = &f
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	_, err := kube.Client.DiscoveryV1().EndpointSlices(h.ns).Create(context.Background(), s, metav1.CreateOptions{})
	h.try(err)
}

func (h *hostile) egressService(i int) {
	ctx := context.Background()
	name := fmt.Sprintf("h%d", i)
	if len(h.services) > 0 && h.rng.IntN(3) > 0 {
		name = h.services[h.rng.IntN(len(h.services))]
	}
	es := &egressv1.EgressService{ObjectMeta: hostileMeta(name), Spec: egressv1.EgressServiceSpec{
		SourceIPBy: egressv1.SourceIPMode(h.pick("", string(egressv1.LoadBalancerIP), string(egressv1.Network), "Bogus")),
		Network: h.pick("", "", "100", "vrf-red", "a b", "a/b", "-1", "4294967296", strings.Repeat("n", 16), strings.Repeat("n", 63),
			strings.Repeat("n", 130), strings.Repeat("n", 300)),
	}}
	switch h.rng.IntN(4) {
	case 0:
		es.Spec.NodeSelector.MatchLabels = map[string]string{"egress": "yes"}
	case 1:
		es.Spec.NodeSelector.MatchLabels = map[string]string{"a:b": "c&"}
	case 2:
		es.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOperator(h.pick("In", "Exists", "Sideways"))}}
	}
	created, err := kube.Egress.K8sV1().EgressServices(h.ns).Create(ctx, es, metav1.CreateOptions{})
	h.try(err)
	if err != nil || h.rng.IntN(3) > 0 {
		return
	}
	created.Status.Host = h.pick("node9", "ALL", "node1", "", strings.Repeat("x", 80))
	_, err = kube.Egress.K8sV1().EgressServices(h.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	h.try(err)
}

func (h *hostile) node(name string) {
	ann := map[string]any{}
	switch h.rng.IntN(4) {
	case 0:
		ann[translate.AnnotNodeSubnets] = h.pick(`{"default":"not-a-cidr"}`, `{`, `{"default":["10.244.1.0/24","garbage"]}`, `[]`)
	case 1:
		ann[translate.AnnotHostCIDRs] = h.pick(`["172.18.0.2/16","nope"]`, `"x"`, `[]`)
	case 2:
		ann["k8s.ovn.org/node-transit-switch-port-ifaddr"] = h.pick(`{"ipv4":"100.88.0.2/16"}`, `{"ipv4":"bad"}`)
	default:
		ann["k8s.ovn.org/zone-name"] = h.pick(name, "elsewhere", "")
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	_, err := kube.Client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, b, metav1.PatchOptions{})
	h.try(err)
	time.Sleep(5 * time.Millisecond) // let the master see some of the broken states, not only the last
}
