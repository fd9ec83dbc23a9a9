package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/node"
)

// agentTable is the routing table the bench's rules point at.
const agentTable = 100

// agentState is what a node agent programs for every endpoint of the
// world: one ip rule (spec.network set) and one SNAT map element each.
func (w *world) agentState() nodeplan.NodeState {
	st := nodeplan.NodeState{NoSNAT: w.topo.ClusterSubnets}
	for s := 0; s < w.size.Services; s++ {
		for j := 0; j < w.size.endpointsOf(s); j++ {
			ip, _ := w.endpoint(s, j)
			st.Rules = append(st.Rules, nodeplan.IPRule{Family: ipfamily.V4, Priority: nodeplan.DefaultRulePriority,
				Src: netip.PrefixFrom(ip, 32), Table: agentTable})
			st.SNAT = append(st.SNAT, nodeplan.SNATElement{Family: ipfamily.V4, Endpoint: ip, SNATIP: w.lbIP(s), Owner: w.key(s)})
		}
	}
	return st
}

// netns creates a named network namespace with lo up; the returned
// function deletes it.
func netns(name string) (func(), error) {
	// /run/netns set up as the tests set it up (shared self-bind, under
	// their lock), so that this `ip netns add` never stacks a bind over
	// namespaces a test process beside it has mounted.
	if err := testenv.PrepareNetNSDir(); err != nil {
		return nil, err
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, out)
	}
	del := func() { _ = exec.Command("ip", "netns", "del", name).Run() }
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		del()
		return nil, fmt.Errorf("lo up in %s: %w: %s", name, err, out)
	}
	return del, nil
}

// runNodeAgent (issue 8 scenario 7): N×M ip rules and SNAT map elements
// programmed in a network namespace by pkg/node's Applier, against the
// limit: one `ip -batch` and one `nft -f` of the same content, each run
// from a thread inside a fresh namespace, as knftables runs nft.
func (b *bench) runNodeAgent(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 20*time.Minute)
	defer cancel()
	want := b.w.agentState()
	r.metric("ip rules", float64(len(want.Rules)), "rules")
	r.metric("SNAT map elements", float64(len(want.SNAT)), "elements")

	// Both namespaces exist before either is measured and are deleted only
	// at the end: the kernel tears a namespace's rules down asynchronously,
	// and that work would otherwise run during the second measurement.
	name := fmt.Sprintf("oeb-agent-%d-1", os.Getpid())
	del, err := netns(name)
	if err != nil {
		return err
	}
	defer del()
	limitNS := fmt.Sprintf("oeb-limit-%d-2", os.Getpid())
	delLimit, err := netns(limitNS)
	if err != nil {
		return err
	}
	defer delLimit()
	ns, err := node.OpenNamespace(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	nl, err := node.NewKernelNetlink(ns)
	if err != nil {
		return err
	}
	var nft knftables.Interface
	if err := ns.Do(func() (err error) {
		nft, err = knftables.New(knftables.InetFamily, node.TableName)
		return err
	}); err != nil {
		return wrap("knftables", err)
	}
	cfg := node.DefaultApplierConfig()
	cfg.EnableForwarding = false
	a, err := node.NewApplier(cfg, nl, nft, node.NewProcSysctl(), b.log.WithField("subsys", "applier"))
	if err != nil {
		return err
	}
	a.ReadTableWith(node.TableReader{}) // as the agent reads its table
	apply := func() (node.Result, time.Duration, error) {
		var res node.Result
		start := time.Now()
		err := ns.Do(func() (err error) {
			res, err = a.Apply(ctx, want, node.ApplyOptions{})
			return err
		})
		return res, time.Since(start), err
	}
	b.step("node agent: %d rules and %d SNAT elements", len(want.Rules), len(want.SNAT))
	res, took, err := apply()
	if err != nil {
		return wrap("applier", err)
	}
	if res.Added != len(want.Rules)+len(want.SNAT) {
		return fmt.Errorf("applier added %d, want %d", res.Added, len(want.Rules)+len(want.SNAT))
	}
	_, again, err := apply()
	if err != nil {
		return wrap("applier, nothing to change", err)
	}
	r.seconds("applier: from empty", took)
	r.seconds("applier: again, nothing to change (lists the kernel)", again)

	ipTook, nftTook, err := b.agentLimit(limitNS, want)
	if err != nil {
		return err
	}
	limit := ipTook + nftTook
	r.seconds("limit: ip -batch of the rules", ipTook)
	r.seconds("limit: nft -f of the table and elements", nftTook)
	r.seconds("limit: both", limit)
	rt := ratio(took.Seconds(), limit.Seconds())
	r.check("node agent: applier vs one ip -batch + one nft -f", rt, "×", "<=", 1.5,
		fmt.Sprintf("%s vs %s = %s", sec(took), sec(limit), times(rt)), "≤ 1.5×")
	return nil
}

// agentLimit programs the same state in the fresh namespace name with one
// `ip -batch` and one `nft -f`, and times each.
func (b *bench) agentLimit(name string, want nodeplan.NodeState) (ipTook, nftTook time.Duration, err error) {
	dir := filepath.Join(b.tmp, "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, fmt.Errorf("create %s: %w", dir, err)
	}
	var rules bytes.Buffer
	for _, r := range want.Rules {
		fmt.Fprintf(&rules, "rule add from %s lookup %d priority %d\n", r.Src, r.Table, r.Priority)
	}
	var nft bytes.Buffer
	t := "inet " + node.TableName
	fmt.Fprintf(&nft, "add table %s { comment \"owned by ovn-egress node agent; changes are overwritten\" ; }\n", t)
	fmt.Fprintf(&nft, "add map %s snat-v4 { type ipv4_addr : ipv4_addr ; comment \"endpoint -> SNAT address\" ; }\n", t)
	fmt.Fprintf(&nft, "add map %s snat-v6 { type ipv6_addr : ipv6_addr ; comment \"endpoint -> SNAT address\" ; }\n", t)
	fmt.Fprintf(&nft, "add counter %s leak-guard-invalid\n", t)
	fmt.Fprintf(&nft, "add counter %s leak-guard-unsnatted\n", t)
	var nosnat []string
	for _, p := range want.NoSNAT {
		nosnat = append(nosnat, p.String())
	}
	for _, c := range []struct{ name, typ, prio, last4, last6 string }{
		{"pod-snat", "nat", "srcnat - 10", "snat ip to ip saddr map @snat-v4", "snat ip6 to ip6 saddr map @snat-v6"},
		{"leak-guard", "filter", "srcnat + 10", "ip saddr @snat-v4 counter name \"leak-guard-unsnatted\" drop", "ip6 saddr @snat-v6 counter name \"leak-guard-unsnatted\" drop"},
	} {
		fmt.Fprintf(&nft, "add chain %s %s { type %s hook postrouting priority %s ; policy accept ; }\n", t, c.name, c.typ, c.prio)
		for _, rule := range []string{"meta mark 0x3f0 return", `oifname "ovn-k8s-mp0" return`,
			"ip daddr { " + strings.Join(nosnat, ", ") + " } return", c.last4, c.last6} {
			fmt.Fprintf(&nft, "add rule %s %s %s comment \"bench\"\n", t, c.name, rule)
		}
	}
	fmt.Fprintf(&nft, "add element %s snat-v4 { ", t)
	for i, e := range want.SNAT {
		if i > 0 {
			nft.WriteString(", ")
		}
		fmt.Fprintf(&nft, "%s comment %q : %s", e.Endpoint, e.Owner, e.SNATIP)
	}
	nft.WriteString(" }\n")
	rulesFile, nftFile := filepath.Join(dir, "rules.batch"), filepath.Join(dir, "table.nft")
	if err := os.WriteFile(rulesFile, rules.Bytes(), 0o644); err != nil {
		return 0, 0, fmt.Errorf("write %s: %w", rulesFile, err)
	}
	if err := os.WriteFile(nftFile, nft.Bytes(), 0o644); err != nil {
		return 0, 0, fmt.Errorf("write %s: %w", nftFile, err)
	}
	ns, err := node.OpenNamespace(name)
	if err != nil {
		return 0, 0, err
	}
	defer ns.Close()
	run := func(args ...string) (time.Duration, error) {
		var took time.Duration
		err := ns.Do(func() error {
			start := time.Now()
			out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			took = time.Since(start)
			if err != nil {
				return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
			}
			return nil
		})
		return took, err
	}
	if ipTook, err = run("ip", "-batch", rulesFile); err != nil {
		return 0, 0, err
	}
	nftTook, err = run("nft", "-f", nftFile)
	return ipTook, nftTook, err
}
