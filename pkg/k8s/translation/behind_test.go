package translation_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestABehindAgentsDriftedAddressStaysOut: while a host's agent has not
// caught up with a service, the service keeps only the endpoints its host's
// set has in NB. An address removed from that set behind ovn-egress's back
// is then no longer one it may reroute — putting it back would reroute a
// pod to an agent that may not SNAT it — so it stays out until the report
// catches up, and then comes back. (Either NB state is a fixpoint of the
// whole translation, which reads NB's members: the oracle cannot tell the
// two apart, this test can.)
func TestABehindAgentsDriftedAddressStaysOut(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	cfg := translate.DefaultConfig()
	cfg.ClusterSubnets, cfg.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
	o := testenv.NewOVN(t, testenv.OVNOptions{NoNorthd: true})
	o.MustNBCtl(t, topo.NBCtlCommands()...)
	w := &world{t: t, rnd: rand.New(rand.NewPCG(1, 1)), topo: topo, o: o, cfg: cfg,
		kube: kubefake.NewClientset(), egress: egressfake.NewSimpleClientset()}
	ctx := context.Background()
	for _, n := range topo.Nodes {
		_, err := w.kube.CoreV1().Nodes().Create(ctx, topo.NodeObject(n), metav1.CreateOptions{})
		w.must("create node", err)
	}
	_, err := w.kube.CoreV1().Services("a").Create(ctx, testenv.LoadBalancerService("a", "web", "172.18.0.100"), metav1.CreateOptions{})
	w.must("create service", err)
	w.writeSlices("a", "web", []string{"10.244.1.10@node1", "10.244.1.11@node1"})
	_, err = w.egress.K8sV1().EgressServices("a").Create(ctx, testenv.EgressService("a", "web", "node2"), metav1.CreateOptions{})
	w.must("create egressservice", err)
	es, err := w.egress.K8sV1().EgressServices("a").Get(ctx, "web", metav1.GetOptions{})
	w.must("get egressservice", err)
	current := w.reportFor("node2", es)
	w.writeReport("node2", translate.Report{"a/web": current})

	run := w.start()
	defer run.stop(t)
	set := translate.AddressSetName("ovn-egress:" + translate.OwnerHost + ":node2:v4")
	members := func() string {
		out, err := o.NBCtl("--bare", "--columns=addresses", "find", "Address_Set", "name="+set)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	wait := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !ok(members()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: node2's set is %q", what, members())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("both endpoints, the agent caught up", func(m string) bool { return m == "10.244.1.10 10.244.1.11" })

	behind := current
	behind.Endpoints = "behind"
	w.writeReport("node2", translate.Report{"a/web": behind})
	wait("the agent behind: the set as it was", func(m string) bool { return m == "10.244.1.10 10.244.1.11" })
	o.MustNBCtl(t, "remove", "Address_Set", set, "addresses", `"10.244.1.11"`)
	time.Sleep(time.Second) // the drift's sync, and any that would undo it
	for !(run.c.Synced() && run.c.Idle()) {
		time.Sleep(20 * time.Millisecond)
	}
	if m := members(); m != "10.244.1.10" {
		t.Errorf("the agent behind: an address removed from the set came back: %q", m)
	}

	w.writeReport("node2", translate.Report{"a/web": current})
	wait("the agent caught up again", func(m string) bool { return m == "10.244.1.10 10.244.1.11" })
}
