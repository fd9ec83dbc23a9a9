//go:build demo

package local

import (
	"context"
	"flag"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
)

var once = flag.Bool("once", false, "show once and exit instead of staying up until Ctrl-C")

// TestDemo is `make demo`: the local cluster with the example objects, the
// master choosing a host, and the source address the outside world sees
// before and after the EgressService exists; then an EgressIP for a batch
// pod of the same namespace.
func TestDemo(t *testing.T) {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	show := func(title, out string) {
		fmt.Printf("\n$ %s\n%s\n", title, strings.TrimRight(out, "\n"))
	}
	say("starting OVN (NB, SB, northd), Open vSwitch + ovn-controller, 3 nodes in network namespaces, kube-apiserver ...")
	c := newCluster(t, options{families: []ipfamily.Family{ipfamily.V4}, namespace: "shop",
		egressIP: true})
	say("cluster up: 3 nodes; the product's image (make image) runs through runc as the Helm chart's pods: the master in its pod, one node agent per node in its host network namespace, as their ServiceAccounts")

	// The example workload: shop/web with pods on node1 and node3, node2
	// labelled egress=true (examples/).
	c.label("node2", "egress", "true")
	p1, p3 := c.addPod("web-1", "node1", 5), c.addPod("web-3", "node3", 5)
	lb := c.service("web", 0, p1, p3)
	ext := netip.AddrPortFrom(c.dp.ExtIPs()[0], echoPort)
	say("Service shop/web (LoadBalancer) got %s from MetalLB's pool (examples/metallb.yaml); pods 10.244.1.5 on node1 and 10.244.3.5 on node3", lb[0])
	for _, p := range []*pod{p1, p3} {
		got, _, err := testenv.AskUntil(p.ns, "tcp", ext, 10*time.Second)
		say("before: pod %s on %s → %s: the outside sees %s (its node's address) %v", p.ips[0], p.node, ext, got, errString(err))
	}

	say("creating EgressService shop/web (sourceIPBy LoadBalancerIP, nodeSelector egress=true) ...")
	c.egressService("web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP,
		NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "true"}}})
	host := c.host("web", anyHost)
	say("the master chose %s as host", host)
	for _, p := range []*pod{p1, p3} {
		got, took, err := testenv.AskUntil(p.ns, "tcp", ext, 20*time.Second, lb...)
		say("after: pod %s on %s → %s: the outside sees %s (after %s) %v", p.ips[0], p.node, ext, got, took.Round(time.Millisecond), errString(err))
	}
	say("host %s; MetalLB announces %s from: %s (the outside world's neighbour entry is %s)", host, lb[0], c.announcingNode(lb[0]), c.extNeighbour(lb[0]))

	out, _ := kube.Kubectl("get", "egressservices", "-A", "-o", "wide")
	show("kubectl get egressservices -A -o wide", out)
	out, _ = kube.Kubectl("get", "nodes", "-L", "egress", "--show-labels=false")
	show("kubectl get nodes -L egress", out)
	out, _ = kube.Kubectl("get", "servicel2statuses", "-n", testenv.MetalLBNamespace,
		"-o", "custom-columns=NAMESPACE:.status.serviceNamespace,SERVICE:.status.serviceName,ANNOUNCED FROM:.status.node")
	show("kubectl get servicel2statuses -n "+testenv.MetalLBNamespace+"   (MetalLB: who announces)", out)
	out, _ = c.ovn.NBCtl("lr-policy-list", "ovn_cluster_router")
	show("ovn-nbctl lr-policy-list ovn_cluster_router", out)
	out, _ = c.ovn.NBCtl("--columns=name,addresses,external_ids", "find", "Address_Set", "external_ids:k8s.ovn.org/owner-controller=ovn-egress")
	show("ovn-nbctl find Address_Set external_ids:k8s.ovn.org/owner-controller=ovn-egress", out)
	out, _ = c.dp.Hosts[host].Run("nft", "list", "table", "inet", "ovn-egress")
	show(fmt.Sprintf("nft list table inet ovn-egress   (in %s's host namespace)", host), out)
	if m, err := c.masterMetrics(c.leaderIndex()); err == nil {
		show(fmt.Sprintf("ip netns exec %s curl -s 127.0.0.1:%d/metrics   (the master, in its pod; excerpt)", c.mpods[0].Name, masterMetricsPort), metricLines(m,
			"ovn_egress_master_leader", "ovn_egress_egressservices", "ovn_egress_host_changes_total", "ovn_egress_nb_transactions_total"))
	}
	if m, err := c.agentMetricsOf(host); err == nil {
		show(fmt.Sprintf("ip netns exec %s curl -s %s   (%s's agent, in its host namespace, on the node's IP; excerpt)", c.dp.Hosts[host].Name, c.agentURL(host, "/metrics"), host), metricLines(m,
			"ovn_egress_node_snat_elements", "ovn_egress_node_ready_services", "ovn_egress_node_leak_guard_dropped_packets_total"))
	}

	demoEgressIP(c, ext, say, show)

	fmt.Printf("\nTo explore:\n  export KUBECONFIG=%s\n  export OVN_NB_DB=%s\n  sudo ip netns exec %s nft list ruleset\n",
		kube.Kubeconfig, c.ovn.NBAddress(), c.dp.Hosts[host].Name)
	if *once {
		say("done (--once): tearing down")
		return
	}
	say("running; press Ctrl-C to tear everything down")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	say("tearing down")
}

// demoEgressIP shows an EgressIP: shop's app=batch pods leave with
// 172.18.0.220 through node3, the egress-assignable node.
func demoEgressIP(c *cluster, ext netip.AddrPort, say func(string, ...any), show func(string, string)) {
	c.label("node3", egressip.LabelEgressAssignable, "")
	batch := c.addPod("batch-1", "node1", 7)
	c.podObject(batch, map[string]string{"app": "batch"})
	got, _, err := testenv.AskUntil(batch.ns, "tcp", ext, 10*time.Second)
	say("before: pod %s (shop/batch-1, app=batch) on node1 → %s: the outside sees %s %v", batch.ips[0], ext, got, errString(err))
	eip := netip.MustParseAddr("172.18.0.220")
	say("labelling node3 k8s.ovn.org/egress-assignable; creating EgressIP shop-batch (%s, namespace shop, pods app=batch) ...", eip)
	eips, err := eipclient.NewForConfig(kube.Config)
	if err == nil {
		_, err = eips.K8sV1().EgressIPs().Create(context.Background(), &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "shop-batch"},
			Spec: egressipv1.EgressIPSpec{EgressIPs: []string{eip.String()},
				NamespaceSelector: selector("kubernetes.io/metadata.name", "shop"), PodSelector: selector("app", "batch")}}, metav1.CreateOptions{})
	}
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		_ = eips.K8sV1().EgressIPs().Delete(context.Background(), "shop-batch", metav1.DeleteOptions{})
	})
	got, took, err := testenv.AskUntil(batch.ns, "tcp", ext, 20*time.Second, eip)
	say("after: pod %s → %s: the outside sees %s (after %s) %v", batch.ips[0], ext, got, took.Round(time.Millisecond), errString(err))
	out, _ := kube.Kubectl("get", "egressips")
	show("kubectl get egressips", out)
	out, _ = c.ovn.NBCtl("lr-nat-list", "GR_node3")
	show("ovn-nbctl lr-nat-list GR_node3   (the EgressIP's SNAT beside the node's own)", out)
}

// metricLines prints the series of the named metrics, sorted.
func metricLines(m testenv.Samples, names ...string) string {
	var lines []string
	for series, v := range m {
		for _, n := range names {
			if series == n || strings.HasPrefix(series, n+"{") {
				lines = append(lines, fmt.Sprintf("%s %v", series, v))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func errString(err error) string {
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return ""
}

// announcingNode names the node(s) whose announcer MAC the outside world
// has for ip.
func (c *cluster) announcingNode(ip netip.Addr) string {
	mac := c.extNeighbour(ip)
	var nodes []string
	for _, n := range c.topo.Nodes {
		if mac != "" && c.announcerMAC(n.Name) == mac {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) == 0 {
		return "no node"
	}
	return strings.Join(nodes, ", ")
}
