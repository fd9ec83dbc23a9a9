package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
)

// TestOVNReroutePolicyReachesSB proves the environment end to end: a reroute
// policy written through libovsdb is listed by ovn-nbctl and, after northd
// has synced, exists as an lr_in_policy logical flow in the SB.
func TestOVNReroutePolicyReachesSB(t *testing.T) {
	for _, fams := range [][]ipfamily.Family{{ipfamily.V4}, {ipfamily.V6}, {ipfamily.V4, ipfamily.V6}} {
		t.Run(familiesName(fams), func(t *testing.T) {
			o := NewOVN(t)
			topo := DefaultTopology(3, fams...)
			o.BuildTopology(t, topo)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := ovn.NewNBClient(ctx, ovn.ClientConfig{Addresses: []string{o.NBAddress()}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			var ops []ovsdb.Operation
			var names []string
			for i, f := range fams {
				pod := topo.Nodes[0].PodIP(f, 5)
				mgmt := topo.Nodes[1].MgmtIPs()[i]
				p := &nbdb.LogicalRouterPolicy{UUID: "pol" + string(f), Priority: 101,
					Match:  f.OVNMatch() + ".src == " + pod.String(),
					Action: nbdb.LogicalRouterPolicyActionReroute, Nexthops: []string{mgmt.String()},
					ExternalIDs: map[string]string{"test": "yes"}}
				create, err := c.Create(p)
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, create...)
				names = append(names, p.UUID)
			}
			lr := &nbdb.LogicalRouter{}
			mut, err := c.WhereAll(lr, model.Condition{Field: &lr.Name, Function: ovsdb.ConditionEqual, Value: "ovn_cluster_router"}).
				Mutate(lr, model.Mutation{Field: &lr.Policies, Mutator: ovsdb.MutateOperationInsert, Value: names})
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, mut...)
			res, err := c.Transact(ctx, ops...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
				t.Fatal(err)
			}

			list := o.MustNBCtl(t, "lr-policy-list", "ovn_cluster_router")
			o.MustNBCtl(t, "--wait=sb", "sync")
			flows := o.MustSBCtl(t, "lflow-list", "ovn_cluster_router")
			for i, f := range fams {
				match := f.OVNMatch() + ".src == " + topo.Nodes[0].PodIP(f, 5).String()
				if !strings.Contains(list, match) || !strings.Contains(list, "reroute") || !strings.Contains(list, topo.Nodes[1].MgmtIPs()[i].String()) {
					t.Errorf("lr-policy-list lacks %q rerouting to %s:\n%s", match, topo.Nodes[1].MgmtIPs()[i], list)
				}
				found := false
				for _, l := range strings.Split(flows, "\n") {
					if strings.Contains(l, "lr_in_policy") && strings.Contains(l, "priority=101") && strings.Contains(l, match) {
						found = true
					}
				}
				if !found {
					t.Errorf("no lr_in_policy flow for %q in SB", match)
				}
			}
		})
	}
}

// TestOVNTopology checks the topology reads back as ovn-kubernetes lays it out.
func TestOVNTopology(t *testing.T) {
	o := NewOVN(t)
	topo := DefaultTopology(3, ipfamily.V4, ipfamily.V6)
	o.BuildTopology(t, topo)
	routers := o.MustNBCtl(t, "--bare", "--columns=name", "list", "Logical_Router")
	for _, r := range []string{"ovn_cluster_router", "GR_node1", "GR_node2", "GR_node3"} {
		if !strings.Contains(routers, r) {
			t.Errorf("router %s missing: %s", r, routers)
		}
	}
	if got := o.MustNBCtl(t, "get", "Logical_Router", "GR_node2", "options:chassis"); got != "chassis-node2" {
		t.Errorf("GR_node2 chassis = %s", got)
	}
	if got := o.MustNBCtl(t, "get", "Logical_Router_Port", "rtoj-GR_node2", "networks"); got != `["100.64.0.3/16", "fd98::3/64"]` {
		t.Errorf("rtoj-GR_node2 networks = %s", got)
	}
	nat := o.MustNBCtl(t, "lr-nat-list", "GR_node1")
	if !strings.Contains(nat, "172.18.0.2") || !strings.Contains(nat, "10.244.0.0/16") || !strings.Contains(nat, "fd00:10:244::/48") {
		t.Errorf("GR_node1 default SNAT missing:\n%s", nat)
	}
	routes := o.MustNBCtl(t, "lr-route-list", "ovn_cluster_router")
	if !strings.Contains(routes, "10.244.2.0/24") || !strings.Contains(routes, "src-ip") {
		t.Errorf("src-ip routes missing:\n%s", routes)
	}
	o.AddPod(t, "node1", "pod1", topo.Nodes[0].PodIP(ipfamily.V4, 5), topo.Nodes[0].PodIP(ipfamily.V6, 5))
	o.MustNBCtl(t, "--wait=sb", "sync")
	// A pod's packet to the outside goes to its node's gateway router.
	out, err := o.Trace("--minimal", "node1",
		`inport == "node1_pod1" && eth.src == `+MAC(topo.Nodes[0].PodIP(ipfamily.V4, 5))+` && eth.dst == `+MAC(ipfamily.Nth(topo.Nodes[0].Subnets[0], 1))+
			` && ip4.src == 10.244.1.5 && ip4.dst == 8.8.8.8 && ip.ttl == 64 && tcp`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `output("breth0_node1")`) || !strings.Contains(out, "eth.src = "+MAC(topo.Nodes[0].ExternalIPs[0].Addr())) {
		t.Errorf("trace does not leave through GR_node1:\n%s", out)
	}
}

// TestOVNRestartNB checks the NB server restarts on the same database.
func TestOVNRestartNB(t *testing.T) {
	o := NewOVN(t)
	o.MustNBCtl(t, "lr-add", "r1")
	o.KillNB()
	if _, err := o.NBCtl("--timeout=1", "lr-list"); err == nil {
		t.Fatal("nbctl worked against a killed NB")
	}
	if err := o.StartNB(); err != nil {
		t.Fatal(err)
	}
	if got := o.MustNBCtl(t, "--bare", "--columns=name", "list", "Logical_Router"); got != "r1" {
		t.Fatalf("after restart: %q", got)
	}
}

func familiesName(fs []ipfamily.Family) string {
	var s []string
	for _, f := range fs {
		s = append(s, string(f))
	}
	return strings.Join(s, "+")
}

// TestOVNWithRAFTNB: a RAFT NB of three members under ovn-northd keeps
// serving clients of every member's socket while its leader is killed,
// and northd carries the NB's rows to the SB through it.
func TestOVNWithRAFTNB(t *testing.T) {
	o := NewOVN(t, OVNOptions{NBMembers: 3})
	if got := len(strings.Split(o.NBAddress(), ",")); got != 3 {
		t.Fatalf("NBAddress %q: want three members", o.NBAddress())
	}
	o.MustNBCtl(t, "ls-add", "before")
	killed := o.KillNBLeader()
	if killed < 0 {
		t.Fatal("no NB member led")
	}
	o.MustNBCtl(t, "--wait=sb", "ls-add", "during")
	if err := o.StartNBMember(killed); err != nil {
		t.Fatal(err)
	}
	o.KillNB()
	if err := o.StartNB(); err != nil {
		t.Fatal(err)
	}
	o.MustNBCtl(t, "--wait=sb", "ls-add", "after")
	dps := o.MustSBCtl(t, "--bare", "--columns=external_ids", "list", "Datapath_Binding")
	for _, ls := range []string{"before", "during", "after"} {
		if !strings.Contains(dps, "name="+ls) {
			t.Errorf("switch %s not in the SB's datapaths:\n%s", ls, dps)
		}
	}
	if len(o.NBTCPAddresses()) != 3 {
		t.Errorf("NBTCPAddresses %v: want three", o.NBTCPAddresses())
	}
}
