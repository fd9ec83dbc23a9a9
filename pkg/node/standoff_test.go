package node_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/node"
)

// TestNodeAgentStandsBackForOVNKube (issue 39.7): on a node where
// ovn-kubernetes' own egress-service controller has its nftables chain
// (table inet ovn-kubernetes, chain egress-services, as ovnkube-node makes
// it), the agent — deployed as in TestNodeAgentKubeAPIServer — programs
// nothing for a service hosted there and reports nothing, with a Warning
// OVNKubernetesConflict on its Node; once the chain is removed (what
// `ovn-egress migrate --apply` does) it programs and reports the service.
func TestNodeAgentStandsBackForOVNKube(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, topo, ns, pod := hostedWeb(t, ctx)
	n := topo.Nodes[0]

	netns := testenv.NewNetNS(t, "oe-stand")
	netns.MustRun(t, "nft", "add table inet ovn-kubernetes ; add chain inet ovn-kubernetes egress-services ;"+
		" add map inet ovn-kubernetes egress-service-snat-v4 { type ipv4_addr : ipv4_addr ; }")
	cfg := startKubeAgent(t, ctx, k, topo, n, netns)

	wait(t, "an OVNKubernetesConflict Event on the Node",
		nodeWarning(t, ctx, k, n.Name, node.ReasonOVNKubernetesConflict, "chain inet ovn-kubernetes egress-services"))
	reported := func() bool { return reportHas(t, ctx, k, cfg, n.Name, ns+"/web") }
	// The Event comes from the sync that found the chain, with the service
	// already in the caches: that sync wrote nothing.
	if reported() {
		t.Errorf("the agent reported the service beside ovn-kubernetes' chain")
	}
	if out, err := netns.Run("nft", "list", "table", "inet", node.TableName); err == nil {
		t.Errorf("the agent created its table beside ovn-kubernetes' chain:\n%s", out)
	}

	// migrate --apply removes the chain and the maps.
	if _, err := node.MigrateNode(ctx, netns.Name, true); err != nil {
		t.Fatal(err)
	}
	wait(t, "the service reported once the chain is gone", reported)
	if table := netns.MustRun(t, "nft", "list", "table", "inet", node.TableName); !strings.Contains(table, pod.String()) {
		t.Errorf("no SNAT for %s after the chain went:\n%s", pod, table)
	}
}

// TestNodeAgentStandsBackForAnotherInstall (issue 39.7): while the zone
// translation beside the agent finds the zone's NB claimed by another
// install of ovn-egress — whose agent then runs on this node too — the
// agent programs nothing and reports nothing, with a Warning AnotherInstance
// on its Node naming that install; once the claim is gone it programs and
// reports the service.
func TestNodeAgentStandsBackForAnotherInstall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k, topo, ns, pod := hostedWeb(t, ctx)
	n := topo.Nodes[0]

	relay := &coexist.Relay{}
	relay.Set(coexist.Conflict{ForeignInstance: "team-b/ovn-egress"})
	netns := testenv.NewNetNS(t, "oe-other")
	cfg := startKubeAgent(t, ctx, k, topo, n, netns, func(c *node.Config) { c.ZoneClaim = relay })

	wait(t, "an AnotherInstance Event on the Node", nodeWarning(t, ctx, k, n.Name, node.ReasonAnotherInstance, `"team-b/ovn-egress"`))
	reported := func() bool { return reportHas(t, ctx, k, cfg, n.Name, ns+"/web") }
	if reported() {
		t.Errorf("the agent reported the service while another install holds its zone")
	}
	if out, err := netns.Run("nft", "list", "table", "inet", node.TableName); err == nil {
		t.Errorf("the agent created its table while another install holds its zone:\n%s", out)
	}

	relay.Set(coexist.Conflict{})
	wait(t, "the service reported once the other install's claim is gone", reported)
	if table := netns.MustRun(t, "nft", "list", "table", "inet", node.TableName); !strings.Contains(table, pod.String()) {
		t.Errorf("no SNAT for %s after the claim went:\n%s", pod, table)
	}
}

// reportHas reports whether the agent's report of node lists the service.
func reportHas(t *testing.T, ctx context.Context, k *testenv.Kube, cfg node.Config, nodeName, service string) bool {
	t.Helper()
	_, ok := readReport(t, ctx, k, cfg, nodeName)[service]
	return ok
}

// hostedWeb is the API server of agentKube with the EgressService web of
// one pod hosted on the single node.
func hostedWeb(t *testing.T, ctx context.Context) (*testenv.Kube, testenv.Topology, string, netip.Addr) {
	k, topo, ns := agentKube(t, ctx, ipfamily.V4)
	n := topo.Nodes[0]
	pod := n.PodIP(ipfamily.V4, 5)
	k.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100"}, pod.String()+"@"+n.Name)
	k.SetHost(t, ns, "web", n.Name)
	return k, topo, ns, pod
}
