package master_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/zone"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestSecondInstanceStandsBack: two installs of ovn-egress on one NB (two
// releases, or the manifests beside the chart) cannot tell each other's
// rows from their own. The first master claims the NB; the second — here
// configured differently, so that it would rewrite the first one's rows:
// the ovn backend, where the first runs the host backend — writes
// nothing, not even at a resync, and says which install holds the NB and
// how to release it. Once the first is gone and its claim released as the
// message says, the second claims the NB and writes its own rows.
// (Before: the second master deleted the first one's rows at once, and the
// two rewrote each other's.)
func TestSecondInstanceStandsBack(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	cfgA := c.config("instance-a")
	cfgA.Translation.Translate.AssumeAgentsReady = true
	cfgA.Instance = "ns-a/ovn-egress"
	_, stopA := c.start(cfgA, kube.Config)
	c.eventually("the first install's set", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })

	cfgB := c.config("instance-b")
	cfgB.Translation.Translate.AssumeAgentsReady = true
	cfgB.Translation.Translate.Backend = translate.BackendOVN
	cfgB.Instance = "ns-b/ovn-egress"
	cfgB.ConflictClearAfter = time.Second
	b, stopB := c.start(cfgB, kube.Config)
	defer stopB()
	c.eventually("the second install standing back", func() bool { return b.Conflict().ForeignInstance == "ns-a/ovn-egress" })
	if s := b.Conflict().String(); !strings.Contains(s, `"ns-a/ovn-egress"`) || !strings.Contains(s, "ovn-nbctl remove NB_Global . external_ids "+ovn.InstanceKey) {
		t.Errorf("the standoff does not say who holds the NB and how to release it: %s", s)
	}
	before := b.Translation().Stats()
	b.Translation().EnqueueAll()
	blockedSince(c, b, before.Blocked, -1)
	if st := b.Translation().Stats(); st.Transactions != before.Transactions {
		t.Errorf("the second install made %d NB transactions", st.Transactions-before.Transactions)
	}
	if got := c.setAddresses("node2"); got != `["10.244.1.5"]` {
		t.Errorf("the second install changed the first one's set: %s", got)
	}

	// The first install is uninstalled, its claim released as the message
	// says: the second claims the NB and writes its own rows (the gateway
	// path's, in place of the host path's).
	stopA()
	c.ovn.MustNBCtl(t, "remove", "NB_Global", ".", "external_ids", ovn.InstanceKey)
	defer func() {
		if t.Failed() {
			t.Logf("the second install's conflict: %s; its syncs %+v; claim %s", b.Conflict(), b.Translation().Stats(), c.ovn.MustNBCtl(t, "get", "NB_Global", ".", "external_ids"))
		}
	}()
	c.eventually("the second install resuming", func() bool {
		return !b.Conflict().Active() && c.setAddresses("node2") == "" && b.Translation().Stats().Transactions > before.Transactions
	})
	if got := strings.Trim(strings.TrimSpace(c.ovn.MustNBCtl(t, "get", "NB_Global", ".", "external_ids:"+`"`+ovn.InstanceKey+`"`)), `"`); got != "ns-b/ovn-egress" {
		t.Errorf("the NB is claimed by %q; want ns-b/ovn-egress", got)
	}
}

// TestZoneOfASecondInstanceStandsBack: a zone's NB claimed by another
// install (its zones run beside this one's, a second DaemonSet) gets
// nothing from this install's zone translation, and the zone's verdict in
// its node's report says so — which stands this install's interconnect
// master back too. Released, the zone claims its NB and writes its rows.
func TestZoneOfASecondInstanceStandsBack(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	z2 := testenv.NewOVN(t)
	z2.BuildZone(t, topo, "node2")
	z2.MustNBCtl(t, "set", "NB_Global", ".", `external_ids:"`+ovn.InstanceKey+`"="ns-a/ovn-egress"`)
	kube.CreateNodes(t, topo)
	freshReports(t, topo)
	ns := kube.Namespace(t)
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, ns, "web", "node2")
	kube.SetReport(t, "node2", translate.Report{ns + "/web": kube.ReportFor(t, "node2", ns, "web", topo.ClusterSubnets)})
	ctx, cancel := context.WithCancel(context.Background())
	tc := translate.DefaultConfig()
	tc.ClusterSubnets, tc.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
	done := make(chan error, 1)
	go func() {
		done <- zone.Run(ctx, zone.Config{NB: ovn.ClientConfig{Addresses: []string{z2.NBAddress()}}, Node: "node2", ReportNamespace: testenv.ReportNamespace,
			Translation: translation.Config{Translate: tc, Zone: "node2"}, Instance: "ns-b/ovn-egress", ConflictClearAfter: time.Second},
			zone.Clients{Kube: kube.Client, Egress: kube.Egress}, testLogger(t))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("zone: %v", err)
		}
	}()
	owned := func() string {
		return strings.TrimSpace(z2.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Address_Set", "external_ids:"+translate.KeyOwnerController+"="+translate.OwnerController))
	}
	verdict := func() string {
		name, _ := translate.ReportConfigMapName("node2")
		cm, err := kube.Client.CoreV1().ConfigMaps(testenv.ReportNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data[coexist.ReportVerdictKey]
	}
	eventually(t, "the zone's verdict naming the other install", func() bool { return strings.Contains(verdict(), `\"ns-a/ovn-egress\"`) })
	if got := owned(); got != "" {
		t.Errorf("the zone wrote into an NB another install claimed: address sets %s", got)
	}
	m := icMaster(t, "ic-instance", master.ControllerSelection)
	eventually(t, "the interconnect master standing back by the zone's verdict", func() bool {
		c := m.Conflict()
		return c.Active() && slices.Equal(c.Zones, []string{"node2"})
	})

	z2.MustNBCtl(t, "remove", "NB_Global", ".", "external_ids", ovn.InstanceKey)
	eventually(t, "the zone's rows once the claim is released", func() bool { return owned() != "" && verdict() == "" })
	eventually(t, "the master resuming", func() bool { return !m.Conflict().Active() })
	if got := strings.Trim(strings.TrimSpace(z2.MustNBCtl(t, "get", "NB_Global", ".", `external_ids:"`+ovn.InstanceKey+`"`)), `"`); got != "ns-b/ovn-egress" {
		t.Errorf("the zone's NB is claimed by %q; want ns-b/ovn-egress", got)
	}
}
