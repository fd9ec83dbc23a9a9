package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

type mapSysctl map[string]string

func (m mapSysctl) Get(n string) (string, error) {
	v, ok := m[n]
	if !ok {
		return "", fmt.Errorf("no such sysctl %s: %w", n, fs.ErrNotExist)
	}
	return v, nil
}
func (m mapSysctl) Set(n, v string) error { m[n] = v; return nil }

func testLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

type fakeEnv struct {
	nl     *FakeNetlink
	nft    *knftables.Fake
	sysctl mapSysctl
	a      *Applier
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	e := &fakeEnv{nl: NewFakeNetlink(), nft: knftables.NewFake(knftables.InetFamily, TableName),
		sysctl: mapSysctl{"net/ipv4/ip_forward": "0", "net/ipv6/conf/all/forwarding": "0", "net/ipv4/conf/ovn-k8s-mp0/forwarding": "0"}}
	a, err := NewApplier(DefaultApplierConfig(), e.nl, e.nft, e.sysctl, testLog())
	if err != nil {
		t.Fatal(err)
	}
	e.a = a
	return e
}

func rule(s string) nodeplan.IPRule {
	// "10.0.0.1 100" or "169.254.169.3:30300 100"
	var r nodeplan.IPRule
	src, table, _ := strings.Cut(s, " ")
	host, port, hasPort := strings.Cut(src, "|")
	a := netip.MustParseAddr(host)
	r.Family, r.Priority, r.Src = ipfamily.Of(a), nodeplan.DefaultRulePriority, netip.PrefixFrom(a, a.BitLen())
	if hasPort {
		r.SourcePort = uint16(mustAtoi(port))
	}
	r.Table = uint32(mustAtoi(table))
	return r
}

func mustAtoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func elem(ep, snat, owner string) nodeplan.SNATElement {
	a := netip.MustParseAddr(ep)
	return nodeplan.SNATElement{Family: ipfamily.Of(a), Endpoint: a, SNATIP: netip.MustParseAddr(snat), Owner: owner}
}

func kernelRuleFor(t *testing.T, src string, sport uint16, table, prio int) *netlink.Rule {
	t.Helper()
	r := netlink.NewRule()
	_, n, err := net.ParseCIDR(src)
	if err != nil {
		t.Fatal(err)
	}
	r.Src, r.Table, r.Priority = n, table, prio
	r.Family = netlink.FAMILY_V4
	if n.IP.To4() == nil {
		r.Family = netlink.FAMILY_V6
	}
	if sport != 0 {
		r.Sport = netlink.NewRulePortRange(sport, sport)
	}
	return r
}

// TestNodeApplierRepair is ovn-kubernetes' node repair case (§4.3 case 1):
// rules at the owned priority with a wrong table, an unknown source or an
// unknown sport are deleted, so are map elements of a gone endpoint, with
// a wrong LB IP, of a gone service; valid ones stay untouched. A rule is
// the agent's when it carries its protocol; an unmarked rule of its shape
// at its priority is an older release's and is replaced by a marked one.
// Anyone else's rules — at other priorities, or at the agent's own with
// another shape or another protocol — are never touched.
func TestNodeApplierRepair(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t)
	// Foreign rules at other priorities (foreign nft tables are checked
	// against the real kernel: the fake is bound to the agent's table).
	must(t, e.nl.RuleAdd(kernelRuleFor(t, "10.128.0.3/32", 0, 100, 6000)))
	must(t, e.nl.RuleAdd(kernelRuleFor(t, "0.0.0.0/0", 0, 254, 32766)))
	// Someone else's at the agent's priority: another shape, unmarked, and
	// the agent's shape with ovn-kubernetes' protocol.
	must(t, e.nl.RuleAdd(kernelRuleFor(t, "10.96.0.0/16", 0, 100, 5000)))
	foreign := kernelRuleFor(t, "10.128.0.7/32", 0, 100, 5000)
	foreign.Protocol = 85
	must(t, e.nl.RuleAdd(foreign))
	// Stale owned state, from a previous agent run (marked), and an older
	// release's unmarked rules.
	for _, r := range []*netlink.Rule{
		kernelRuleFor(t, "10.128.0.3/32", 0, 100, 5000),        // valid, unmarked
		kernelRuleFor(t, "10.128.0.4/32", 0, 101, 5000),        // wrong table, unmarked
		kernelRuleFor(t, "10.128.0.99/32", 0, 100, 5000),       // unknown source, unmarked
		kernelRuleFor(t, "169.254.169.3/32", 30300, 100, 5000), // valid, unmarked
		kernelRuleFor(t, "169.254.169.3/32", 31111, 100, 5000), // unknown sport, unmarked
		kernelRuleFor(t, "10.96.0.0/16", 0, 100, 4000),         // another shape and priority, marked
	} {
		if r.Priority == 4000 {
			r.Protocol = DefaultRuleProtocol
		}
		must(t, e.nl.RuleAdd(r))
	}
	want := nodeplan.NodeState{
		Rules: []nodeplan.IPRule{rule("10.128.0.3 100"), rule("10.128.0.4 100"), rule("169.254.169.3|30300 100")},
		SNAT:  []nodeplan.SNATElement{elem("10.128.0.3", "5.5.5.5", "namespace1/service1"), elem("10.128.0.4", "6.6.6.6", "namespace1/service2")},
	}
	if _, err := e.a.Apply(ctx, nodeplan.NodeState{SNAT: []nodeplan.SNATElement{
		elem("10.128.0.3", "5.5.5.5", "namespace1/service1"), // valid
		elem("10.128.0.4", "7.7.7.7", "namespace1/service2"), // wrong LB
		elem("10.128.0.5", "5.5.5.5", "namespace1/service1"), // gone endpoint
		elem("10.128.0.6", "8.8.8.8", "namespace9/gone"),     // gone service
	}}, ApplyOptions{KeepStale: true}); err != nil {
		t.Fatal(err)
	}
	res, err := e.a.Apply(ctx, want, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantRules := "v4 5000: from 10.96.0.0/16 lookup 100\nv4 5000: from 10.128.0.7 lookup 100 proto 85\n" +
		"v4 5000: from 10.128.0.3 lookup 100 proto 97\nv4 5000: from 10.128.0.4 lookup 100 proto 97\n" +
		"v4 5000: from 169.254.169.3 sport 30300 lookup 100 proto 97\n" +
		"v4 6000: from 10.128.0.3 lookup 100\nv4 32766: from 0.0.0.0/0 lookup 254\n"
	if got := e.nl.Dump(); got != wantRules {
		t.Errorf("rules:\n%s\nwant:\n%s", got, wantRules)
	}
	dump := e.nft.Dump()
	for _, s := range []string{
		`add element inet ovn-egress snat-v4 { 10.128.0.3 comment "namespace1/service1" : 5.5.5.5 }`,
		`add element inet ovn-egress snat-v4 { 10.128.0.4 comment "namespace1/service2" : 6.6.6.6 }`,
	} {
		if !strings.Contains(dump, s) {
			t.Errorf("nft dump lacks %q:\n%s", s, dump)
		}
	}
	if n := strings.Count(dump, "add element inet ovn-egress snat-"); n != 2 {
		t.Errorf("%d SNAT elements; want 2:\n%s", n, dump)
	}
	// The stale endpoints went into the withdrawn set (with their SNAT's
	// removal, in one transaction); the re-pointed one did not.
	if n := strings.Count(dump, "add element inet ovn-egress withdrawn-"); n != 2 ||
		!strings.Contains(dump, "withdrawn-v4 { 10.128.0.5 }") || !strings.Contains(dump, "withdrawn-v4 { 10.128.0.6 }") {
		t.Errorf("withdrawn elements: want 10.128.0.5 and 10.128.0.6:\n%s", dump)
	}
	if got, want := stateString(res.Reached), stateString(want); got != want {
		t.Errorf("reached:\n%s\nwant:\n%s", got, want)
	}
	// IPv4 only, and only on the management port (no route here leads
	// elsewhere): the node's global switch stays off.
	if e.sysctl["net/ipv4/conf/ovn-k8s-mp0/forwarding"] != "1" || e.sysctl["net/ipv4/ip_forward"] != "0" || e.sysctl["net/ipv6/conf/all/forwarding"] != "0" {
		t.Errorf("sysctls %v; want IPv4 forwarding on the management port only", e.sysctl)
	}
	// A second apply changes nothing.
	writes := e.nl.Writes
	res, err = e.a.Apply(ctx, want, ApplyOptions{})
	if err != nil || res.Changed() || e.nl.Writes != writes {
		t.Errorf("second apply: changed=%v (%+v) err=%v", res.Changed(), res, err)
	}
}

// TestNodeApplierAddsBeforeDeletes: with KeepStale nothing goes; errors of
// one rule do not stop the others, and Reached says exactly what exists.
func TestNodeApplierAddsBeforeDeletes(t *testing.T) {
	ctx := context.Background()
	e := newFakeEnv(t)
	old := nodeplan.NodeState{Rules: []nodeplan.IPRule{rule("10.128.0.3 100")},
		SNAT: []nodeplan.SNATElement{elem("10.128.0.3", "5.5.5.5", "ns/a")}}
	if _, err := e.a.Apply(ctx, old, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	next := nodeplan.NodeState{Rules: []nodeplan.IPRule{rule("10.128.0.3 200"), rule("fe00::3 200")},
		SNAT: []nodeplan.SNATElement{elem("10.128.0.3", "6.6.6.6", "ns/a"), elem("fe00::3", "5:5::5", "ns/a")}}
	e.nl.Fail = func(op string, r *netlink.Rule) error {
		if op == "add" && r.Family == netlink.FAMILY_V6 {
			return unix.EPERM
		}
		return nil
	}
	res, err := e.a.Apply(ctx, next, ApplyOptions{KeepStale: true})
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("err = %v; want EPERM", err)
	}
	want := "v4 5000: from 10.128.0.3 lookup 100\nv4 5000: from 10.128.0.3 lookup 200\n" +
		"v4 10.128.0.3 : 6.6.6.6  # ns/a\nv6 fe00::3 : 5:5::5  # ns/a\n"
	if got := stateString(res.Reached); got != want {
		t.Errorf("reached:\n%s\nwant:\n%s", got, want)
	}
	if res.Stale != 1 {
		t.Errorf("stale = %d; want 1 (the table-100 rule the add phase kept)", res.Stale)
	}
	e.nl.Fail = nil
	res, err = e.a.Apply(ctx, next, ApplyOptions{})
	if err != nil || res.Stale != 0 {
		t.Fatalf("full apply: stale %d, %v", res.Stale, err)
	}
	if got, want := stateString(res.Reached), stateString(next); got != want {
		t.Errorf("reached:\n%s\nwant:\n%s", got, want)
	}
	// Deletion removes everything owned, and only that.
	res, err = e.a.Apply(ctx, nodeplan.NodeState{}, ApplyOptions{})
	if err != nil || len(res.Reached.Rules)+len(res.Reached.SNAT) != 0 || e.nl.Dump() != "" {
		t.Errorf("after deleting all: reached %s, rules %q, err %v", stateString(res.Reached), e.nl.Dump(), err)
	}
}

func TestNodeApplierConfigValidate(t *testing.T) {
	for _, p := range []int{0, -1, 32766, 40000} {
		c := DefaultApplierConfig()
		c.RulePriority = p
		if c.Validate() == nil {
			t.Errorf("priority %d accepted", p)
		}
	}
	for _, port := range []string{`mp0" accept`, "a b", "0123456789abcdef"} {
		c := DefaultApplierConfig()
		c.MgmtPort = port
		if c.Validate() == nil {
			t.Errorf("management port %q accepted", port)
		}
	}
	if err := DefaultApplierConfig().Validate(); err != nil {
		t.Error(err)
	}
	e := newFakeEnv(t)
	r := rule("10.0.0.1 100")
	r.Priority = 6000
	if _, err := e.a.Apply(context.Background(), nodeplan.NodeState{Rules: []nodeplan.IPRule{r}}, ApplyOptions{}); err == nil {
		t.Error("a rule at a foreign priority was accepted")
	}
}

func stateString(st nodeplan.NodeState) string {
	var b strings.Builder
	for _, r := range st.Rules {
		b.WriteString(r.String() + "\n")
	}
	for _, e := range st.SNAT {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// racingNetlink shows the applier a rule table that changed between its
// dump and its writes: extra rules are listed but gone (delete → ENOENT),
// hidden rules exist but are not listed (add → EEXIST).
type racingNetlink struct {
	*FakeNetlink
	extra  []netlink.Rule
	hidden string // Src of a rule left out of the dump
}

func (r racingNetlink) RuleList(family int) ([]netlink.Rule, error) {
	rules, err := r.FakeNetlink.RuleList(family)
	var out []netlink.Rule
	for _, x := range rules {
		if x.Src == nil || x.Src.String() != r.hidden {
			out = append(out, x)
		}
	}
	for _, x := range r.extra {
		if x.Family == family {
			out = append(out, x)
		}
	}
	return out, err
}

// TestNodeApplierErrnoIdempotence: "exists" on add and "not found" on
// delete are success, decided by errno.
func TestNodeApplierErrnoIdempotence(t *testing.T) {
	fake := NewFakeNetlink()
	must(t, fake.RuleAdd(kernelRule(rule("10.128.0.3 100"), DefaultRuleProtocol)))
	nl := racingNetlink{FakeNetlink: fake, extra: []netlink.Rule{*kernelRuleFor(t, "10.128.0.9/32", 0, 100, 5000)}, hidden: "10.128.0.3/32"}
	a, err := NewApplier(DefaultApplierConfig(), nl, knftables.NewFake(knftables.InetFamily, TableName), mapSysctl{"net/ipv4/ip_forward": "1"}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	want := nodeplan.NodeState{Rules: []nodeplan.IPRule{rule("10.128.0.3 100")}}
	res, err := a.Apply(context.Background(), want, ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if got := stateString(res.Reached); got != stateString(want) || res.Stale != 0 {
		t.Errorf("reached %q (stale %d); want %q", got, res.Stale, stateString(want))
	}
	if !errors.Is(fake.RuleAdd(kernelRule(rule("10.128.0.3 100"), DefaultRuleProtocol)), unix.EEXIST) ||
		!errors.Is(fake.RuleDel(kernelRuleFor(t, "10.128.0.9/32", 0, 100, 5000)), unix.ENOENT) {
		t.Error("the fake does not answer like the kernel")
	}
}
