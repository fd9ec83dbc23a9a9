package local

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TestLocalGatewayMode: the nodes in ovn-kubernetes' local gateway mode
// (pod egress routed to the node's management port, the host masquerades
// this node's pod subnet; reference: ovn-kubernetes-local-gateway.md), with
// real packets, as ovn-kubernetes' own e2e checks it:
//   - without an EgressService the pods leave with their node's address;
//   - with one, every endpoint leaves with the LB IP, and ingress to the LB IP
//     reaches a backend and its replies come back;
//   - a pod on the host node itself reaching another node's address keeps
//     its node's address (the allow policy's pkt_mark=1008 makes every SNAT
//     but the node's own masquerade step aside), and pod → pod keeps the pod's;
//   - after the EgressService is deleted the pods leave with their node's
//     address again.
//
// IPv4 and dual-stack. The suite's capture checks that no pod address ever
// reaches the outside.
func TestLocalGatewayMode(t *testing.T) {
	for _, fams := range [][]ipfamily.Family{{ipfamily.V4}, {ipfamily.V4, ipfamily.V6}} {
		t.Run(familiesName(fams), func(t *testing.T) {
			c := newCluster(t, options{families: fams, gatewayMode: "local"})
			p1, p2, p3 := c.addPod("p1", "node1", 5), c.addPod("p2", "node2", 5), c.addPod("p3", "node3", 5)
			lb := c.service("web", 0, p1, p2, p3)
			for _, p := range []*pod{p1, p2, p3} {
				c.expectSource(p, 15*time.Second, c.nodeAddr(p.node))
			}
			c.egressService("web", egressv1.EgressServiceSpec{})
			host := c.host("web", anyHost)
			for _, p := range []*pod{p1, p2, p3} {
				c.expectSource(p, 15*time.Second, only(lb))
			}
			c.expectIngress(lb, 10*time.Second)

			var onHost, other *pod
			for _, p := range []*pod{p1, p2, p3} {
				if p.node == host {
					onHost = p
				} else if other == nil {
					other = p
				}
			}
			target := other.node
			testenv.StartEcho(t, c.dp.Hosts[target], echoPort, hostIPs(c, target)...)
			for _, dst := range hostIPs(c, target) {
				got, _, err := testenv.AskUntil(onHost.ns, "tcp", netip.AddrPortFrom(dst, echoPort), 5*time.Second)
				if err != nil || !contains(c.nodeAddr(host)(ipfamily.Of(dst)), got) {
					t.Errorf("pod %s on the host %s → %s's address %s: seen %s (%v), want %s's own address", onHost.name, host, target, dst, got, err, host)
				}
			}
			for _, dst := range other.ips {
				got, _, err := testenv.AskUntil(onHost.ns, "tcp", netip.AddrPortFrom(dst, echoPort), 5*time.Second)
				if err != nil || !contains(onHost.ips, got) {
					t.Errorf("pod %s → pod %s: seen %s (%v), want the pod's own address", onHost.name, dst, got, err)
				}
			}

			if err := kube.Egress.K8sV1().EgressServices(c.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*pod{p1, p2, p3} {
				c.expectSource(p, 15*time.Second, c.nodeAddr(p.node))
			}
		})
	}
}

// TestLocalGatewayNetworkMode: sourceIPBy Network in local gateway mode
// (where ovn-kubernetes supports it): no reroute, each pod leaves from its
// own node through the network's table with its node's address; a
// blackhole in that table stops it. And LoadBalancerIP with spec.network:
// through the host's table, still with the LB IP.
func TestLocalGatewayNetworkMode(t *testing.T) {
	c := newCluster(t, options{gatewayMode: "local"})
	c.table(100)
	p1, p3 := c.addPod("p1", "node1", 5), c.addPod("p3", "node3", 5)
	c.service("web", 0, p1, p3)
	c.egressService("web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.Network, Network: "100"})
	c.host("web", func(h string) bool { return h == egressv1.HostAll })
	// Without the rule the pods leave with their node's address too: wait
	// for it, so that the blackhole below tests it.
	c.ruleFor("node1", p1, 100)
	c.ruleFor("node3", p3, 100)
	c.expectSource(p1, 15*time.Second, c.nodeAddr("node1"))
	c.expectSource(p3, 15*time.Second, c.nodeAddr("node3"))
	c.blackhole("node1", 100, true)
	c.expectBlocked(p1, 2*time.Second)
	c.expectSource(p3, 5*time.Second, c.nodeAddr("node3"))
	c.blackhole("node1", 100, false)
	c.expectSource(p1, 15*time.Second, c.nodeAddr("node1"))

	q := c.addPod("q1", "node1", 6)
	lb := c.service("api", 1, q)
	c.egressService("api", egressv1.EgressServiceSpec{Network: "100"})
	host := c.host("api", anyHost)
	c.ruleFor(host, q, 100)
	c.expectSource(q, 15*time.Second, only(lb))
	c.blackhole(host, 100, true)
	c.expectBlocked(q, 2*time.Second)
	c.blackhole(host, 100, false)
	c.expectSource(q, 15*time.Second, only(lb))
}

// ruleFor waits until node's agent has the ip rule of pod p into table.
func (c *cluster) ruleFor(node string, p *pod, table int) {
	c.t.Helper()
	for _, ip := range p.ips {
		want := fmt.Sprintf("from %s lookup %d", ip, table)
		flag := "-4"
		if ip.Is6() {
			flag = "-6"
		}
		c.eventually(want+" on "+node, 15*time.Second, func() bool {
			out, _ := c.dp.Hosts[node].Run("ip", flag, "rule", "show")
			return strings.Contains(out, want)
		})
	}
}
