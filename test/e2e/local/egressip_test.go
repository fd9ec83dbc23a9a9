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
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
)

// egressIPRows writes ovn-kubernetes' EgressIP rows for one pod exactly as
// its controller does (reference: ovn-kubernetes-live.md, "What ovnkube
// writes when its EgressIP feature is on"): the priority-102 no-reroute
// allow policies, the Pod-To-Node allow with pkt_mark=1008 over its
// served-pods and node-ips sets, the per-pod priority-100 reroute to the
// egress node's GR join address, and the per-pod SNAT on that GR.
func (c *cluster) egressIPRows(p *pod, egressNode string, eip netip.Addr) {
	c.t.Helper()
	nbctl := func(args ...string) { c.ovn.MustNBCtl(c.t, args...) }
	ids := func(name string) []string {
		return []string{`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
			fmt.Sprintf(`external_ids:"k8s.ovn.org/name"=%q`, name), `external_ids:"priority"="102"`, `external_ids:"ip-family"="ip4"`, `external_ids:"network"="default"`}
	}
	allow := func(name, match string, opts ...string) {
		args := append([]string{"--", "--id=@p", "create", "Logical_Router_Policy", "priority=102", fmt.Sprintf("match=%q", match), "action=allow"}, opts...)
		args = append(args, ids(name)...)
		nbctl(append(args, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")...)
	}
	cluster, join := c.topo.ClusterSubnets[0], c.topo.JoinSubnets[0]
	var nodeIPs []string
	for _, n := range c.topo.Nodes {
		for _, h := range append(append([]netip.Prefix{}, n.ExternalIPs...), n.HostIPs...) {
			if h.Addr().Is4() {
				nodeIPs = append(nodeIPs, fmt.Sprintf("%q", h.Addr().String()))
			}
		}
	}
	nbctl("create", "Address_Set", "name=a8519615025667110816", fmt.Sprintf("addresses=%q", p.ips[0].String()),
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
		`external_ids:"k8s.ovn.org/name"="egressip-served-pods"`, `external_ids:"ip-family"="v4"`, `external_ids:"network"="default"`)
	nbctl("create", "Address_Set", "name=a13607449821398607916", "addresses=[]",
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressService"`,
		`external_ids:"k8s.ovn.org/name"="egresssvc-served-pods"`, `external_ids:"ip-family"="v4"`)
	nbctl("create", "Address_Set", "name=a1042611113178530741", "addresses="+strings.Join(nodeIPs, ","),
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="ClusterNodeIPs"`,
		`external_ids:"k8s.ovn.org/name"="node-ips"`, `external_ids:"ip-family"="v4"`)
	allow("EIP-No-Reroute-Pod-To-Pod", fmt.Sprintf("ip4.src == %s && ip4.dst == %s", cluster, cluster))
	allow("EIP-No-Reroute-Pod-To-Join", fmt.Sprintf("ip4.src == %s && ip4.dst == %s", cluster, join))
	allow("EIP-No-Reroute-reply-traffic", "pkt.mark == 42")
	allow("EIP-No-Reroute-Pod-To-Node", "(ip4.src == $a8519615025667110816 || ip4.src == $a13607449821398607916) && ip4.dst == $a1042611113178530741",
		`options:pkt_mark="1008"`)
	n := c.topo.Node(egressNode)
	nbctl("--", "--id=@p", "create", "Logical_Router_Policy", "priority=100", fmt.Sprintf(`match="ip4.src == %s"`, p.ips[0]),
		"action=reroute", fmt.Sprintf("nexthops=%q", n.JoinIPs[0].Addr().String()),
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
		`external_ids:"k8s.ovn.org/name"="eip1_default/`+p.name+`"`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	nbctl("--portrange", "lr-nat-add", "GR_"+egressNode, "snat", eip.String(), p.ips[0].String(), "32768-60999")
	c.dp.WaitHV(c.t)
}

// TestBesideOVNKubernetesEgressIP: ovn-kubernetes' EgressIP (its rows as it
// writes them, on the same priorities 100 and 102) and an EgressService in
// one cluster, with packets: the EgressIP pod leaves with its egress IP, the
// EgressService pods with the LB IP, both reach node addresses with their
// node's address, and deleting the EgressService leaves the EgressIP
// working. ovn-trace agrees with the packets. Both gateway modes (the
// EgressIP rows are the same in both: reroute to the egress node's GR,
// SNAT there).
func TestBesideOVNKubernetesEgressIP(t *testing.T) {
	for _, mode := range []string{"shared", "local"} {
		t.Run(mode, func(t *testing.T) { testBesideOVNKubernetesEgressIP(t, mode) })
	}
}

func testBesideOVNKubernetesEgressIP(t *testing.T, mode string) {
	c := newCluster(t, options{gatewayMode: mode})
	eipPod := c.addPod("eip", "node1", 7)
	eip := netip.MustParseAddr("172.18.0.200")
	c.egressIPRows(eipPod, "node3", eip)
	c.expectSource(eipPod, 15*time.Second, only([]netip.Addr{eip}))

	p1, p2 := c.addPod("p1", "node1", 5), c.addPod("p2", "node2", 5)
	lb := c.service("web", 0, p1, p2)
	c.egressService("web", egressv1.EgressServiceSpec{})
	host := c.host("web", anyHost)
	for _, p := range []*pod{p1, p2} {
		c.expectSource(p, 15*time.Second, only(lb))
	}
	c.expectSource(eipPod, 5*time.Second, only([]netip.Addr{eip}))
	if out, err := c.ovn.Trace("node1", fmt.Sprintf(`inport == "node1_eip" && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == 8.8.8.8 && ip.ttl == 64 && tcp`,
		testenv.MAC(eipPod.ips[0]), testenv.MAC(c.topo.Node("node1").Subnets[0].Addr().Next()), eipPod.ips[0])); err != nil || !strings.Contains(out, "ct_snat("+eip.String()) {
		t.Errorf("ovn-trace of the EgressIP pod: want ct_snat(%s) (%v)\n%s", eip, err, out)
	}

	// Both kinds reach another node's address with their node's address.
	target := "node2"
	if host == target {
		target = "node3"
	}
	testenv.StartEcho(t, c.dp.Hosts[target], echoPort, hostIPs(c, target)...)
	for _, p := range []*pod{p1, p2, eipPod} {
		if p.node == target {
			continue
		}
		for _, dst := range hostIPs(c, target) {
			got, _, err := testenv.AskUntil(p.ns, "tcp", netip.AddrPortFrom(dst, echoPort), 5*time.Second)
			if err != nil || !contains(c.nodeAddr(p.node)(ipfamily.Of(dst)), got) {
				t.Errorf("pod %s → %s's address %s: seen %s (%v), want %s's own address", p.name, target, dst, got, err, p.node)
			}
		}
	}

	if err := kube.Egress.K8sV1().EgressServices(c.ns).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*pod{p1, p2} {
		c.expectSource(p, 15*time.Second, c.nodeAddr(p.node))
	}
	c.expectSource(eipPod, 5*time.Second, only([]netip.Addr{eip}))
	if policies := c.ovn.MustNBCtl(t, "lr-policy-list", "ovn_cluster_router"); !strings.Contains(policies, "pkt.mark == 42") || !strings.Contains(policies, "$a1042611113178530741") {
		t.Errorf("ovn-kubernetes' EgressIP policies gone:\n%s", policies)
	}
}
