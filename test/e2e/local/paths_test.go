package local

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// table gives every host a routing table whose default route leads out of
// eth0 to the outside world, as an operator's network would.
func (c *cluster) table(table int) {
	for _, n := range c.topo.Nodes {
		c.blackhole(n.Name, table, false)
	}
}

// blackhole replaces (or restores) the default route of table on node.
func (c *cluster) blackhole(node string, table int, on bool) {
	h := c.dp.Hosts[node]
	t := strconv.Itoa(table)
	for i, gw := range c.topo.ExternalGateways {
		f := routeFlag(c.topo.Families[i])
		if on {
			h.MustRun(c.t, "ip", f, "route", "replace", "blackhole", "default", "table", t)
		} else {
			h.MustRun(c.t, "ip", f, "route", "replace", "default", "via", gw.String(), "dev", "eth0", "table", t)
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
	c.table(100)
	p1 := c.addPod("p1", "node1", 5)
	lb := c.service("web", 0, p1)
	c.egressService("web", egressv1.EgressServiceSpec{Network: "100"})
	host := c.host("web", anyHost)
	c.expectSource(p1, 15*time.Second, only(lb))
	rules := c.dp.Hosts[host].MustRun(t, "ip", "rule", "show")
	if !strings.Contains(rules, "5000:") || !strings.Contains(rules, "from 10.244.1.5 lookup 100") {
		t.Fatalf("ip rules on %s:\n%s", host, rules)
	}
	// The host's agent says the same in its metrics.
	m, err := c.agentMetricsOf(host)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name string
		min  float64
	}{{"ovn_egress_node_ip_rules", 2}, {"ovn_egress_node_snat_elements", 1}, {"ovn_egress_node_ready_services", 1},
		{"ovn_egress_node_report_lag_seconds_count", 1}, {"ovn_egress_controller_sync_duration_seconds_count", 1}} {
		if v := m.Sum(w.name); v < w.min {
			t.Errorf("agent %s: %s = %v, want ≥ %v", host, w.name, v, w.min)
		}
	}
	c.blackhole(host, 100, true)
	c.expectBlocked(p1, 2*time.Second)
	c.blackhole(host, 100, false)
	c.expectSource(p1, 15*time.Second, only(lb))
}

// TestNetworkMode: sourceIPBy Network → status.host ALL, and each pod
// leaves from its own node through the network's table, with the address
// the node's masquerade gives it (ovn-kubernetes' rule, emulated here).
func TestNetworkMode(t *testing.T) {
	c := newCluster(t, options{})
	c.table(100)
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
	c.blackhole("node1", 100, true)
	c.expectBlocked(p1, 2*time.Second)
	c.expectSource(p3, 5*time.Second, func(ipfamily.Family) []netip.Addr { return hostIPs(c, "node3") })
	c.blackhole("node1", 100, false)
	c.expectSource(p1, 15*time.Second, func(ipfamily.Family) []netip.Addr { return hostIPs(c, "node1") })
}

// TestExternalTrafficPolicyLocal: only a node with a local endpoint is
// chosen; the endpoint leaves with the LB IP, and ingress through the LB IP
// reaches it with the client's address kept. Both gateway modes.
func TestExternalTrafficPolicyLocal(t *testing.T) {
	for _, mode := range []string{"shared", "local"} {
		t.Run(mode, func(t *testing.T) {
			c := newCluster(t, options{gatewayMode: mode})
			p3 := c.addPod("p3", "node3", 5)
			lb := c.service("web", 0, p3)
			svc, err := kube.Client.CoreV1().Services(c.ns).Get(context.Background(), "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			if _, err := kube.Client.CoreV1().Services(c.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			c.egressService("web", egressv1.EgressServiceSpec{})
			// The master may see the EgressService before the policy
			// change and choose by the old Service for a moment; what
			// counts is where it settles.
			c.host("web", func(h string) bool { return h == "node3" })
			c.expectSource(p3, 15*time.Second, only(lb))
			c.expectAnnouncedBy(lb, "node3")
			c.expectIngress(lb, 10*time.Second)
		})
	}
}

// TestTwoNetworks: two EgressServices, each with its own spec.network,
// leave through their own tables and only those: a blackhole in one
// network's table stops that service's pods and not the other's. Both
// gateway modes.
func TestTwoNetworks(t *testing.T) {
	for _, mode := range []string{"shared", "local"} {
		t.Run(mode, func(t *testing.T) {
			c := newCluster(t, options{gatewayMode: mode})
			c.table(100)
			c.table(101)
			p, q := c.addPod("p1", "node1", 5), c.addPod("q1", "node1", 6)
			web, api := c.service("web", 0, p), c.service("api", 1, q)
			c.egressService("web", egressv1.EgressServiceSpec{Network: "100"})
			c.egressService("api", egressv1.EgressServiceSpec{Network: "101"})
			webHost, apiHost := c.host("web", anyHost), c.host("api", anyHost)
			c.ruleFor(webHost, p, 100)
			c.ruleFor(apiHost, q, 101)
			c.expectSource(p, 15*time.Second, only(web))
			c.expectSource(q, 15*time.Second, only(api))
			for _, tc := range []struct {
				host, other string
				table       int
				stop, keep  *pod
				keepSource  []netip.Addr
			}{{webHost, apiHost, 100, p, q, api}, {apiHost, webHost, 101, q, p, web}} {
				c.blackhole(tc.host, tc.table, true)
				c.expectBlocked(tc.stop, 2*time.Second)
				c.expectSource(tc.keep, 5*time.Second, only(tc.keepSource))
				c.blackhole(tc.host, tc.table, false)
				c.expectSource(tc.stop, 15*time.Second, only(map[*pod][]netip.Addr{p: web, q: api}[tc.stop]))
			}
		})
	}
}

// TestUnassignedTrafficDropped: with --unassigned-traffic=drop, the pods of
// an EgressService without a host send nothing out; once a node matches,
// they leave with the LB IP.
func TestUnassignedTrafficDropped(t *testing.T) {
	c := newCluster(t, options{unassigned: "drop"})
	p1 := c.addPod("p1", "node1", 5)
	lb := c.service("web", 0, p1)
	c.egressService("web", egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}}})
	// Wait for the drop itself: p1's addresses in the unassigned set in NB,
	// and then p1 no longer answered from outside (northd and
	// ovn-controller follow the set a moment later).
	c.eventually("p1's addresses in the unassigned set", 20*time.Second, func() bool {
		out, err := c.ovn.NBCtl("--bare", "--columns=addresses", "find", "Address_Set",
			"external_ids:k8s.ovn.org/owner-type="+translate.OwnerUnassigned)
		if err != nil {
			return false
		}
		for _, ip := range p1.ips {
			if !slices.Contains(strings.Fields(strings.ReplaceAll(out, `"`, " ")), ip.String()) {
				return false
			}
		}
		return true
	})
	c.eventually("p1's traffic dropped", 20*time.Second, func() bool {
		for _, ext := range c.dp.ExtIPs() {
			if _, _, err := testenv.AskUntil(p1.ns, "tcp", netip.AddrPortFrom(ext, echoPort), time.Second); err == nil {
				return false
			}
		}
		return true
	})
	if h := c.host("web", func(string) bool { return true }); h != "" {
		t.Fatalf("host %q, want none", h)
	}
	c.expectBlocked(p1, 3*time.Second)
	c.label("node3", "egress", "yes")
	c.host("web", func(h string) bool { return h == "node3" })
	c.expectSource(p1, 15*time.Second, only(lb))
}
