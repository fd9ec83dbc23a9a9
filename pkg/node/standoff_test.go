package node_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/node"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
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
	k, topo, ns := agentKube(t, ctx, ipfamily.V4)
	n := topo.Nodes[0]
	pod := n.PodIP(ipfamily.V4, 5)
	k.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100"}, pod.String()+"@"+n.Name)
	k.SetHost(t, ns, "web", n.Name)

	netns := testenv.NewNetNS(t, "oe-stand")
	netns.MustRun(t, "nft", "add table inet ovn-kubernetes ; add chain inet ovn-kubernetes egress-services ;"+
		" add map inet ovn-kubernetes egress-service-snat-v4 { type ipv4_addr : ipv4_addr ; }")
	cfg := startKubeAgent(t, ctx, k, topo, n, netns)

	wait(t, "an OVNKubernetesConflict Event on the Node", func() bool {
		evs, err := k.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == node.ReasonOVNKubernetesConflict && e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == n.Name &&
				e.Type == "Warning" && strings.Contains(e.Message, "chain inet ovn-kubernetes egress-services") {
				return true
			}
		}
		return false
	})
	cmName, _ := translate.ReportConfigMapName(n.Name)
	reported := func() bool {
		cm, err := k.Client.CoreV1().ConfigMaps(cfg.ReportNamespace).Get(ctx, cmName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := translate.ParseReport(cm.Data[translate.ReportDataKey])
		if err != nil {
			t.Fatal(err)
		}
		_, ok := r[ns+"/web"]
		return ok
	}
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
