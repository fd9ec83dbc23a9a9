package main

import (
	"strings"
	"testing"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestMigrateRemovesOnlyTheBuiltInFeature: on a real NB holding
// ovn-kubernetes' own EgressService rows (EgressSVC reroutes, a local and
// an ":ic" one, and its filled egresssvc-served-pods set), its EgressIP rows
// (the Pod-To-Node policy referencing that set, its own served-pods set),
// another controller's untagged priority-101 policy and ovn-egress's rows,
// `migrate` lists exactly the built-in feature's leftovers and changes
// nothing; `--apply` removes those policies and empties the set, and
// nothing else; a second dry run finds nothing. The same on a node's
// nftables, in a namespace the test creates.
func TestMigrateRemovesOnlyTheBuiltInFeature(t *testing.T) {
	o := testenv.NewOVN(t)
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	o.BuildTopology(t, topo)
	nbctl := func(args ...string) string { return o.MustNBCtl(t, args...) }
	policy := func(prio, match, nexthop string, ids ...string) {
		args := []string{"--", "--id=@p", "create", "Logical_Router_Policy", "priority=" + prio, "match=\"" + match + "\""}
		if nexthop == "" {
			args = append(args, "action=allow")
		} else {
			args = append(args, "action=reroute", "nexthops=\""+nexthop+"\"")
		}
		args = append(args, ids...)
		nbctl(append(args, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")...)
	}
	policy("101", "ip4.src == 10.244.1.5", "10.244.2.2", `external_ids:EgressSVC="shop/web"`)
	policy("101", "ip4.src == 10.244.3.5", "10.244.2.2", `external_ids:EgressSVC="shop/web:ic"`)
	served := "a13607449821398607916"
	nbctl("create", "Address_Set", "name="+served, `addresses="10.244.1.5","10.244.3.5"`,
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressService"`,
		`external_ids:"k8s.ovn.org/name"="egresssvc-served-pods"`, `external_ids:"ip-family"="v4"`)
	nbctl("create", "Address_Set", "name=a8519615025667110816", `addresses="10.244.1.9"`,
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
		`external_ids:"k8s.ovn.org/name"="egressip-served-pods"`, `external_ids:"ip-family"="v4"`)
	policy("102", "(ip4.src == $a8519615025667110816 || ip4.src == $"+served+") && ip4.dst == $a1042611113178530741", "",
		`external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
		`external_ids:"k8s.ovn.org/name"="EIP-No-Reroute-Pod-To-Node"`, `options:pkt_mark="1008"`)
	policy("101", "ip4.src == 10.244.1.77", "10.244.2.2")
	// ovn-egress's own rows for a service hosted on node2.
	ours := translate.AddressSetName("ovn-egress:EgressServiceHost:node2:v4")
	nbctl("create", "Address_Set", "name="+ours, `addresses="10.244.1.6"`, `external_ids:"k8s.ovn.org/owner-controller"="ovn-egress"`,
		`external_ids:"k8s.ovn.org/owner-type"="EgressServiceHost"`, `external_ids:"k8s.ovn.org/name"="node2"`,
		`external_ids:"k8s.ovn.org/id"="ovn-egress:EgressServiceHost:node2:v4"`)
	policy("101", "ip4.src == $"+ours, "10.244.2.2", `external_ids:"k8s.ovn.org/owner-controller"="ovn-egress"`,
		`external_ids:"k8s.ovn.org/owner-type"="EgressServiceHost"`, `external_ids:"k8s.ovn.org/name"="node2"`,
		`external_ids:"k8s.ovn.org/id"="ovn-egress:EgressServiceHost:node2:v4:reroute"`)
	policies := func() string { return nbctl("lr-policy-list", "ovn_cluster_router") }
	before := policies()

	ns := testenv.NewNetNS(t, "oemig")
	ns.MustRun(t, "sh", "-c", `nft -f - <<'EOF'
table inet ovn-kubernetes {
  map egress-service-snat-v4 { type ipv4_addr : ipv4_addr; elements = { 10.244.1.5 : 172.18.0.100 } }
  map egress-service-snat-v6 { type ipv6_addr : ipv6_addr; }
  chain egress-services { type nat hook postrouting priority srcnat; meta mark 0x3f0 return; snat ip to ip saddr map @egress-service-snat-v4; }
  chain mgmtport-snat { type nat hook postrouting priority srcnat; oifname != "ovn-k8s-mp0" return; }
}
EOF`)
	args := []string{"migrate", "--nb-address", o.NBAddress(), "--node", "--netns", ns.Name}

	out, stderr, code := run(t, args...)
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"ip4.src == 10.244.1.5", "EgressSVC=shop/web:ic", served, "2 addresses emptied",
		"chain inet ovn-kubernetes egress-services", "map inet ovn-kubernetes egress-service-snat-v4 (1 elements)",
		"egress-service-snat-v6", "dry run: nothing changed; --apply removes these 6 objects"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	for _, never := range []string{"10.244.1.77", ours, "EIP-No-Reroute", "a8519615025667110816", "mgmtport-snat"} {
		if strings.Contains(out, never) {
			t.Errorf("dry run lists %q, which is not the built-in feature's:\n%s", never, out)
		}
	}
	if policies() != before || !strings.Contains(ns.MustRun(t, "nft", "list", "table", "inet", "ovn-kubernetes"), "egress-services") {
		t.Fatalf("the dry run changed something")
	}

	out, stderr, code = run(t, append(args, "--apply")...)
	if code != 0 || !strings.Contains(out, "removed 6 objects") {
		t.Fatalf("apply: exit %d:\n%s\n%s", code, out, stderr)
	}
	after := policies()
	for _, gone := range []string{"ip4.src == 10.244.1.5", "ip4.src == 10.244.3.5"} {
		if strings.Contains(after, gone) {
			t.Errorf("EgressSVC policy %q left:\n%s", gone, after)
		}
	}
	for _, kept := range []string{"10.244.1.77", "$" + ours, "$a8519615025667110816 || ip4.src == $" + served} {
		if !strings.Contains(after, kept) {
			t.Errorf("policy with %q removed:\n%s", kept, after)
		}
	}
	if got := nbctl("get", "Address_Set", served, "addresses"); got != "[]" {
		t.Errorf("egresssvc-served-pods not emptied: %s", got)
	}
	if got := nbctl("get", "Address_Set", "a8519615025667110816", "addresses"); got != `["10.244.1.9"]` {
		t.Errorf("egressip-served-pods changed: %s", got)
	}
	if got := nbctl("get", "Address_Set", ours, "addresses"); got != `["10.244.1.6"]` {
		t.Errorf("ovn-egress's set changed: %s", got)
	}
	table := ns.MustRun(t, "nft", "list", "table", "inet", "ovn-kubernetes")
	if strings.Contains(table, "egress-service") || !strings.Contains(table, "mgmtport-snat") {
		t.Errorf("node nftables after apply:\n%s", table)
	}

	out, _, code = run(t, args...)
	if code != 0 || !strings.Contains(out, "nothing of ovn-kubernetes' egress features is left") {
		t.Errorf("second dry run: exit %d:\n%s", code, out)
	}
}

// TestMigrateEIPNoRerouteLeftovers: ovn-kubernetes' egress-service feature
// writes four EgressIP no-reroute policies (EIP-No-Reroute-*) per zone and
// leaves them when turned off (seen with the real binaries). While its
// EgressIP serves no pod there (no EgressIP reroute, SNAT or served-pods
// address), migrate lists them and --apply removes them, nothing else; the
// same policies beside a serving EgressIP are its own and stay.
func TestMigrateEIPNoRerouteLeftovers(t *testing.T) {
	o := testenv.NewOVN(t)
	topo := testenv.DefaultTopology(2, ipfamily.V4)
	o.BuildTopology(t, topo)
	nbctl := func(args ...string) string { return o.MustNBCtl(t, args...) }
	for _, name := range []string{"EIP-No-Reroute-Pod-To-Pod", "EIP-No-Reroute-Pod-To-Join", "EIP-No-Reroute-Pod-To-Node", "EIP-No-Reroute-Service"} {
		nbctl("--", "--id=@p", "create", "Logical_Router_Policy", "priority=102", `match="ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16"`,
			"action=allow", `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
			`external_ids:"k8s.ovn.org/name"="`+name+`"`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	}
	served := "a8519615025667110816"
	nbctl("create", "Address_Set", "name="+served, `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`,
		`external_ids:"k8s.ovn.org/owner-type"="EgressIP"`, `external_ids:"k8s.ovn.org/name"="egressip-served-pods"`, `external_ids:"ip-family"="v4"`)
	args := []string{"migrate", "--nb-address", o.NBAddress()}

	// Its EgressIP serves a pod: the policies are its own.
	nbctl("add", "Address_Set", served, "addresses", `"10.244.1.9"`)
	if out, _, code := run(t, args...); code != 0 || strings.Contains(out, "EIP-No-Reroute") {
		t.Errorf("with ovn-kubernetes' EgressIP serving a pod: exit %d, listed:\n%s", code, out)
	}
	nbctl("clear", "Address_Set", served, "addresses")

	out, _, code := run(t, args...)
	if code != 0 || strings.Count(out, "EIP-No-Reroute") != 4 || !strings.Contains(out, "--apply removes these 4 objects") {
		t.Fatalf("dry run: exit %d:\n%s", code, out)
	}
	if out, stderr, code := run(t, append(args, "--apply")...); code != 0 || !strings.Contains(out, "removed 4 objects") {
		t.Fatalf("apply: exit %d:\n%s\n%s", code, out, stderr)
	}
	if left := nbctl("--bare", "--columns=_uuid", "find", "Logical_Router_Policy", `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`); strings.TrimSpace(left) != "" {
		t.Errorf("EIP-No-Reroute policies left: %s", left)
	}
	if got := nbctl("--bare", "--columns=name", "find", "Address_Set", `external_ids:"k8s.ovn.org/name"="egressip-served-pods"`); strings.TrimSpace(got) != served {
		t.Errorf("the egressip-served-pods set was touched: %q", got)
	}
}
