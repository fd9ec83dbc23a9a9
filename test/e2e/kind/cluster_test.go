package kind

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

const (
	echoPort     = 7777 // backends and the external container
	hostEchoPort = 7778 // the host-networked echo for pod → node checks

	productNamespace = "ovn-egress"
	ovnkNamespace    = "ovn-kubernetes"

	// selectorKey is the node label the scenarios select hosts with.
	selectorKey = "ovn-egress.io/e2e-egress"
	// agentOffKey keeps the node agent off a node: hack/deploy.sh gives
	// the DaemonSet a required node affinity on its absence.
	agentOffKey = "ovn-egress.io/e2e-agent-off"

	annotGatewayConfig = "k8s.ovn.org/l3-gateway-config"
)

// env is one scenario's view of the cluster: clients, the Ready nodes, the
// external container's addresses, and a fresh namespace that goes away
// with the test.
type env struct {
	t      *testing.T
	cfg    *rest.Config
	kube   kubernetes.Interface
	egress egressclient.Interface
	dyn    dynamic.Interface
	ns     string
	// nodes are the Ready nodes, sorted by name (at least 3).
	nodes []corev1.Node
	// ext is the external container's address per family.
	ext map[corev1.IPFamily]netip.Addr
	// subnets are the pod networks (leak detection).
	subnets []netip.Prefix
	// gatewayMode is ovn-kubernetes' gateway mode: shared or local.
	gatewayMode string
}

func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// newEnv connects to the cluster, checks its shape and makes the test's
// namespace. Its cleanup asserts that no pod address reached the outside
// world while the test ran, and on failure logs what a reader needs.
func newEnv(t *testing.T) *env {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", *flagKubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", *flagKubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	e := &env{t: t, cfg: cfg, ext: map[corev1.IPFamily]netip.Addr{}}
	if e.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if e.egress, err = egressclient.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	for _, s := range strings.Split(*flagClusterSubnets, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			t.Fatalf("-cluster-subnets: %v", err)
		}
		e.subnets = append(e.subnets, p)
	}
	e.readNodes()
	e.readExternal()

	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	ns, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "oe-e2e-", Labels: map[string]string{"app.kubernetes.io/part-of": "ovn-egress-e2e"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e.ns = ns.Name
	t.Logf("namespace %s; nodes %s; external %v; %s gateway mode", e.ns, e.nodeNames(), e.ext, e.gatewayMode)
	e.extControl("reset")
	t.Cleanup(e.teardown)
	return e
}

// teardown runs last (registered first): diagnostics on failure, the leak
// check, then the namespace.
func (e *env) teardown() {
	if e.t.Failed() {
		e.dump()
	}
	e.assertNoLeak()
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	// EgressServices first, so the master takes its node labels away
	// before the namespace (and the Services) go.
	_ = e.egress.K8sV1().EgressServices(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err := e.kube.CoreV1().Namespaces().Delete(ctx, e.ns, metav1.DeleteOptions{}); err != nil {
		e.t.Logf("delete namespace %s: %v", e.ns, err)
	}
}

func (e *env) readNodes() {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	list, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("list nodes: %v", err)
	}
	for _, n := range list.Items {
		if nodeReady(&n) && !n.Spec.Unschedulable {
			e.nodes = append(e.nodes, n)
		}
	}
	slices.SortFunc(e.nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	if len(e.nodes) < 3 {
		e.t.Fatalf("the scenarios need at least 3 Ready schedulable nodes, the cluster has %d: %v", len(e.nodes), e.nodeNames())
	}
	var cfg map[string]struct {
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal([]byte(e.nodes[0].Annotations[annotGatewayConfig]), &cfg); err != nil {
		e.t.Fatalf("node %s annotation %s: %v (is this ovn-kubernetes?)", e.nodes[0].Name, annotGatewayConfig, err)
	}
	e.gatewayMode = cfg["default"].Mode
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (e *env) nodeNames() []string {
	var out []string
	for _, n := range e.nodes {
		out = append(out, n.Name)
	}
	return out
}

// readExternal reads the external container's addresses on the kind network.
func (e *env) readExternal() {
	format := fmt.Sprintf(`{{with index .NetworkSettings.Networks %q}}{{.IPAddress}} {{.GlobalIPv6Address}}{{end}}`, *flagKindNetwork)
	out, err := e.oci("inspect", "-f", format, *flagExternal)
	if err != nil {
		e.t.Fatalf("external container %s: %v", *flagExternal, err)
	}
	for _, f := range strings.Fields(out) {
		if a, err := netip.ParseAddr(f); err == nil {
			e.ext[familyOf(a)] = a
		}
	}
}

func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// families runs fn once per family of -families, as subtests named after
// the family. A family the external container lacks fails: the cluster is
// not the one the run asked for.
func (e *env) families(fn func(t *testing.T, f corev1.IPFamily)) {
	e.t.Helper()
	for _, f := range e.familyList() {
		e.t.Run(string(f), func(t *testing.T) { fn(t, f) })
	}
}

// familyList is -families, checked against the external container.
func (e *env) familyList() []corev1.IPFamily {
	e.t.Helper()
	var out []corev1.IPFamily
	for _, s := range strings.Split(*flagFamilies, ",") {
		f := corev1.IPFamily(strings.TrimSpace(s))
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			e.t.Fatalf("-families: %q is neither IPv4 nor IPv6", s)
		}
		if !e.ext[f].IsValid() {
			e.t.Fatalf("%s requested (E2E_FAMILIES=%s) but the external container has no %s address on network %s",
				f, *flagFamilies, f, *flagKindNetwork)
		}
		out = append(out, f)
	}
	return out
}

// sub is e for a subtest: same cluster and namespace, t of the subtest.
func (e *env) sub(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// nodeIP is node's InternalIP of family f.
func (e *env) nodeIP(node string, f corev1.IPFamily) netip.Addr {
	e.t.Helper()
	for _, n := range e.nodes {
		if n.Name != node {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && familyOf(ip) == f {
				return ip
			}
		}
	}
	e.t.Fatalf("node %s has no %s InternalIP", node, f)
	return netip.Addr{}
}

// oci runs the container CLI (docker exec into kind nodes and the
// external container) and returns its trimmed output.
func (e *env) oci(args ...string) (string, error) {
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, *flagOCI, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", *flagOCI, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// onNode runs a command on a kind node (a container) and fails the test on error.
func (e *env) onNode(node string, args ...string) string {
	e.t.Helper()
	out, err := e.oci(append([]string{"exec", node}, args...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// extControl sends record or reset to the external echo and returns its answer.
func (e *env) extControl(req string) string {
	e.t.Helper()
	out, err := e.oci("exec", *flagExternal, "/echo", req, "-addr", "127.0.0.1:"+strconv.Itoa(echoPort))
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// assertNoLeak fails the test when the external echo ever answered a
// source inside the pod networks. TCP from a pod address cannot complete a
// handshake (the outside has no route back), but its UDP datagrams arrive
// and are recorded: every ask the suite makes is sent over UDP too.
func (e *env) assertNoLeak() {
	var leaks []string
	for _, line := range strings.Split(e.extControl("record"), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		src, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		for _, p := range e.subnets {
			if p.Contains(src) {
				leaks = append(leaks, fmt.Sprintf("%s (%s times)", src, f[1]))
			}
		}
	}
	if len(leaks) > 0 {
		e.t.Errorf("pod addresses reached the external container: %v", leaks)
	}
}

// eventually polls cond until it holds or timeout passes; cond says why
// it does not hold yet, and the last reason is in the failure.
func (e *env) eventually(what string, timeout time.Duration, cond func() (bool, string)) {
	e.t.Helper()
	start := time.Now()
	var why string
	for {
		ok, reason := cond()
		if ok {
			e.t.Logf("%s (after %s)", what, time.Since(start).Round(100*time.Millisecond))
			return
		}
		why = reason
		if time.Since(start) > timeout {
			e.t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
