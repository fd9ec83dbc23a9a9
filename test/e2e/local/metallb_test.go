package local

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// MetalLB itself (its real controller and speakers, testenv.MetalLB)
// assigns each Service's load-balancer IP from an IPAddressPool and
// announces it, from the node carrying the Service's egress label, through
// an L2Advertisement: the configuration of examples/metallb.yaml. What the
// harness still does is the Service's load balancing (kube-proxy's or
// OVN's job in a real cluster): on the labelled node, TCP to the LB IP is
// DNATed to an endpoint, so that ingress and its replies can be checked.

// metalLBConfig renders examples/metallb.yaml for Service name of the
// test's namespace with the given ingress IPs: the documented manifests,
// with the example's names and address replaced. The pool serves only the
// test's namespace (earlier tests' Services asked for the same addresses).
// With the gateway backend the L2Advertisement is left out: the host's
// gateway router answers for the address itself (nat-addresses=router) —
// in ovn-kubernetes the node and its GR share breth0's MAC, in this
// dataplane they do not, and two answering MACs would split the traffic.
func (c *cluster) metalLBConfig(name string, ingress []netip.Addr) string {
	c.t.Helper()
	b, err := os.ReadFile("../../../examples/metallb.yaml")
	if err != nil {
		c.t.Fatal(err)
	}
	var addrs []string
	for _, ip := range ingress {
		addrs = append(addrs, netip.PrefixFrom(ip, ip.BitLen()).String())
	}
	docs := strings.Split(string(b), "\n---\n")
	if c.opts.backend == "ovn" {
		docs = docs[:1]
	}
	out := strings.Join(docs, "\n---\n")
	label := hosts.NodeLabel(c.ns, name)
	out = strings.NewReplacer(
		"egress-service.k8s.ovn.org/shop-web", label,
		"egress-shop-web", "egress-"+c.ns+"-"+name,
		"  - 172.18.0.100/32\n", "  - "+strings.Join(addrs, "\n  - ")+"\n",
		"  autoAssign: false\n", "  autoAssign: false\n  serviceAllocation:\n    namespaces: [\""+c.ns+"\"]\n",
	).Replace(out)
	return out
}

// applyMetalLB applies a Service's MetalLB configuration and removes it
// when the test ends.
func (c *cluster) applyMetalLB(name string, ingress []netip.Addr) {
	c.t.Helper()
	f := filepath.Join(c.dir, "metallb-"+name+".yaml")
	if err := os.WriteFile(f, []byte(c.metalLBConfig(name, ingress)), 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := kube.Apply(context.Background(), f); err != nil {
		c.t.Fatalf("MetalLB configuration of %s: %v", name, err)
	}
	c.t.Cleanup(func() {
		_, _ = kube.Kubectl("delete", "--ignore-not-found", "-f", f)
	})
}

// unbalancedPort is a port of the LB IPs that nothing balances.
const unbalancedPort = 81

// balanceIngress keeps the DNAT of each egress Service's ingress IPs on
// exactly the node labelled egress-service.k8s.ovn.org/<ns>-<name>, where
// MetalLB announces them (host backend; on the gateway path the GR owns
// the address).
func (c *cluster) balanceIngress(ctx context.Context) {
	// Only TCP port 80 is balanced (loadBalance); unbalancedPort is not.
	for ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		if c.opts.backend != "host" {
			continue
		}
		want := map[netip.Addr]string{}
		backend := map[netip.Addr]netip.Addr{} // LB IP -> first endpoint of its family
		ess, err := kube.Egress.K8sV1().EgressServices(c.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		nodes, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, es := range ess.Items {
			svc, err := kube.Client.CoreV1().Services(c.ns).Get(ctx, es.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, n := range nodes.Items {
				if _, ok := n.Labels[hosts.NodeLabel(es.Namespace, es.Name)]; !ok {
					continue
				}
				for _, in := range svc.Status.LoadBalancer.Ingress {
					if ip, err := netip.ParseAddr(in.IP); err == nil {
						want[ip] = n.Name
						backend[ip] = c.firstEndpoint(ctx, es.Name, ipfamily.Of(ip))
					}
				}
			}
		}
		c.mu.Lock()
		changed := map[string]bool{}
		for ip, node := range c.balanced {
			if want[ip] != node {
				changed[node] = true
				delete(c.balanced, ip)
			}
		}
		for ip, node := range want {
			if c.balanced[ip] != node || c.dnat[ip] != backend[ip] {
				changed[node] = true
			}
			c.balanced[ip] = node
			c.dnat[ip] = backend[ip]
		}
		for node := range changed {
			c.loadBalance(node)
		}
		c.mu.Unlock()
	}
}

// firstEndpoint returns the Service's first endpoint of family f.
func (c *cluster) firstEndpoint(ctx context.Context, svc string, f ipfamily.Family) netip.Addr {
	slices, err := kube.Client.DiscoveryV1().EndpointSlices(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		return netip.Addr{}
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ipfamily.Of(ip) == f {
					return ip
				}
			}
		}
	}
	return netip.Addr{}
}

// loadBalance plays the Service's load balancer on the node holding its
// ingress IPs: TCP to <ingress IP>:80 is DNATed to the first endpoint's
// echo (port 7777), so the outside world reaches the Service through the
// LB IP, and the backend's replies must come back through the same host.
func (c *cluster) loadBalance(node string) {
	var rules []string
	for ip, n := range c.balanced {
		be := c.dnat[ip]
		if n != node || !be.IsValid() {
			continue
		}
		m := "ip"
		if ipfamily.Of(ip) == ipfamily.V6 {
			m = "ip6"
		}
		rules = append(rules, fmt.Sprintf("  %s daddr %s tcp dport 80 dnat %s to %s", m, ip, m, netip.AddrPortFrom(be, echoPort)))
	}
	h := c.dp.Hosts[node]
	_, _ = h.Run("nft", "delete", "table", "inet", "oe-lb")
	if len(rules) == 0 {
		return
	}
	conf := "table inet oe-lb {\n chain pre {\n  type nat hook prerouting priority dstnat; policy accept;\n" + strings.Join(rules, "\n") + "\n }\n}\n"
	if out, err := h.Run("sh", "-c", "printf '"+conf+"' | nft -f -"); err != nil {
		c.t.Errorf("load balancer on %s: %v %s", node, err, out)
	}
}

// expectIngress checks that the outside world reaches the Service through
// its ingress IPs and that the backend sees the client's own address.
func (c *cluster) expectIngress(lb []netip.Addr, timeout time.Duration) {
	c.t.Helper()
	for _, ip := range lb {
		got, took, err := testenv.AskUntil(c.dp.Ext, "tcp", netip.AddrPortFrom(ip, 80), timeout, c.dp.ExtIPs()...)
		if err != nil {
			c.dumpLogs()
			c.t.Fatalf("outside → %s:80: %v (backend saw %s)", ip, err, got)
		}
		c.t.Logf("outside → %s:80: the backend saw %s after %s", ip, got, took.Round(time.Millisecond))
	}
}
