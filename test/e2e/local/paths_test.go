package local

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
)

// table100 gives every host a routing table 100 whose default route leads
// out of eth0 to the outside world, as an operator's network would.
func (c *cluster) table100() {
	for _, n := range c.topo.Nodes {
		h := c.dp.Hosts[n.Name]
		for i, gw := range c.topo.ExternalGateways {
			h.MustRun(c.t, "ip", routeFlag(c.topo.Families[i]), "route", "replace", "default", "via", gw.String(), "dev", "eth0", "table", "100")
		}
	}
}

// blackhole100 replaces (or restores) the default route of table 100 on node.
func (c *cluster) blackhole100(node string, on bool) {
	h := c.dp.Hosts[node]
	for i, gw := range c.topo.ExternalGateways {
		f := routeFlag(c.topo.Families[i])
		if on {
			h.MustRun(c.t, "ip", f, "route", "replace", "blackhole", "default", "table", "100")
		} else {
			h.MustRun(c.t, "ip", f, "route", "replace", "default", "via", gw.String(), "dev", "eth0", "table", "100")
		}
	}
}

func routeFlag(f ipfamily.Family) string {
	if f == ipfamily.V6 {
		return "-6"
	}
	return "-4"
}

// expectBlocked checks that p reaches the outside world not at all for a while.
func (c *cluster) expectBlocked(p *pod, d time.Duration) {
	c.t.Helper()
	for _, ext := range c.dp.ExtIPs() {
		if got, _, err := testenv.AskUntil(p.ns, "tcp", netip.AddrPortFrom(ext, echoPort), d); err == nil {
			c.t.Fatalf("pod %s reached %s (seen %s), want it blocked", p.name, ext, got)
		}
	}
}

// TestNetworkTable: spec.network set → the agent's ip rules send the
// pods' traffic through that table on the host (a blackhole there stops
// it, removing it restores it), still SNATed to the LB IP.
func TestNetworkTable(t *testing.T) {
	c := newCluster(t, options{})
	c.table100()
	p1 := c.addPod("p1", "node1", 5)
	lb := c.service("web", 0, p1)
	c.egressService("web", egressv1.EgressServiceSpec{Network: "100"})
	host := c.host("web", anyHost)
	c.expectSource(p1, 15*time.Second, only(lb))
	rules := c.dp.Hosts[host].MustRun(t, "ip", "rule", "show")
	if !strings.Contains(rules, "5000:") || !strings.Contains(rules, "from 10.244.1.5 lookup 100") {
		t.Fatalf("ip rules on %s:\n%s", host, rules)
	}
	c.blackhole100(host, true)
	c.expectBlocked(p1, 2*time.Second)
	c.blackhole100(host, false)
	c.expectSource(p1, 15*time.Second, only(lb))
}

// TestNetworkMode: sourceIPBy Network → status.host ALL, and each pod
// leaves from its own node through the network's table, with the address
// the node's masquerade gives it (ovn-kubernetes' rule, emulated here).
func TestNetworkMode(t *testing.T) {
	c := newCluster(t, options{})
	c.table100()
	for _, n := range c.topo.Nodes {
		// ovn-kubernetes' local-gateway masquerade of pod traffic leaving the node.
		nft := fmt.Sprintf("table ip ovnk-emul {\n chain post {\n  type nat hook postrouting priority srcnat; policy accept;\n  ip saddr %s oifname \"eth0\" masquerade\n }\n}\n", c.topo.ClusterSubnets[0])
		c.dp.Hosts[n.Name].MustRun(t, "sh", "-c", "printf '"+nft+"' | nft -f -")
	}
	p1, p3 := c.addPod("p1", "node1", 5), c.addPod("p3", "node3", 5)
	c.service("web", 0, p1, p3)
	c.egressService("web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.Network, Network: "100"})
	c.host("web", func(h string) bool { return h == egressv1.HostAll })
	c.expectSource(p1, 15*time.Second, func(ipfamily.Family) []netip.Addr { return hostIPs(c, "node1") })
	c.expectSource(p3, 15*time.Second, func(ipfamily.Family) []netip.Addr { return hostIPs(c, "node3") })
	c.blackhole100("node1", true)
	c.expectBlocked(p1, 2*time.Second)
	c.expectSource(p3, 5*time.Second, func(ipfamily.Family) []netip.Addr { return hostIPs(c, "node3") })
	c.blackhole100("node1", false)
	c.expectSource(p1, 15*time.Second, func(ipfamily.Family) []netip.Addr { return hostIPs(c, "node1") })
}

// TestExternalTrafficPolicyLocal: only a node with a local endpoint is chosen.
func TestExternalTrafficPolicyLocal(t *testing.T) {
	c := newCluster(t, options{})
	p3 := c.addPod("p3", "node3", 5)
	c.service("web", 0, p3)
	svc, err := kube.Client.CoreV1().Services(c.ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	if _, err := kube.Client.CoreV1().Services(c.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.egressService("web", egressv1.EgressServiceSpec{})
	if h := c.host("web", anyHost); h != "node3" {
		t.Fatalf("host %s, want node3 (the only node with an endpoint)", h)
	}
	c.expectSource(p3, 15*time.Second, only([]netip.Addr{netip.MustParseAddr("172.18.0.100")}))
}

// TestUnassignedTrafficDropped: with --unassigned-traffic=drop, the pods of
// an EgressService without a host send nothing out; once a node matches,
// they leave with the LB IP.
func TestUnassignedTrafficDropped(t *testing.T) {
	c := newCluster(t, options{unassigned: "drop"})
	p1 := c.addPod("p1", "node1", 5)
	lb := c.service("web", 0, p1)
	c.egressService("web", egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}}})
	time.Sleep(time.Second) // the master has seen it
	if h := c.host("web", func(string) bool { return true }); h != "" {
		t.Fatalf("host %q, want none", h)
	}
	c.expectBlocked(p1, 3*time.Second)
	c.label("node3", "egress", "yes")
	c.host("web", func(h string) bool { return h == "node3" })
	c.expectSource(p1, 15*time.Second, only(lb))
}
