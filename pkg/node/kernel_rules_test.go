package node

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"strings"
	"testing"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// TestNodeKernelRuleOwnership, against the real kernel (iproute2 reads the
// rules back): the agent's rules carry its protocol (97); on a local-gateway
// node it adds the bypass rule "fwmark 0x3f0 lookup main" at 5999 in both
// families, beside ovn-kubernetes' own copy (protocol 85), and removes only
// its own when the node leaves local gateway mode; an older release's
// unmarked rule of its shape is replaced by a marked one; anyone else's
// rule at its priority — another shape, or another protocol — stays as it
// was; a rule priority ovn-kubernetes owns is refused.
func TestNodeKernelRuleOwnership(t *testing.T) {
	tns := testenv.NewNetNS(t, "oe-rules")
	k := newKernelAgent(t, tns)
	rules := func(f string) string { return tns.MustRun(t, "ip", f, "rule", "show") }
	// Someone else's: ovn-kubernetes' bypass rule, a rule of another shape
	// at 5000, one of the agent's shape with ovn-kubernetes' protocol; and
	// an older release's unmarked rule.
	for _, args := range [][]string{
		{"-4", "rule", "add", "priority", "5999", "fwmark", "0x3f0", "lookup", "main", "proto", "85"},
		{"-4", "rule", "add", "priority", "5000", "from", "10.96.0.0/16", "lookup", "100"},
		{"-4", "rule", "add", "priority", "5000", "from", "10.128.0.7", "lookup", "100", "proto", "85"},
		{"-4", "rule", "add", "priority", "5000", "from", "10.128.0.3", "lookup", "100"},
	} {
		tns.MustRun(t, append([]string{"ip"}, args...)...)
	}
	want := nodeplan.NodeState{BypassRule: true, Rules: []nodeplan.IPRule{rule("10.128.0.3 100"), rule("fd00::3 100")}}
	k.apply(t, want, ApplyOptions{})
	v4, v6 := rules("-4"), rules("-6")
	for _, w := range []string{
		"5000:\tfrom 10.128.0.3 lookup 100 proto 97",
		"5000:\tfrom 10.96.0.0/16 lookup 100",
		"5000:\tfrom 10.128.0.7 lookup 100 proto 85",
		"5999:\tfrom all fwmark 0x3f0 lookup main proto 85",
		"5999:\tfrom all fwmark 0x3f0 lookup main proto 97",
	} {
		if !strings.Contains(v4, w) {
			t.Errorf("IPv4 rules lack %q:\n%s", w, v4)
		}
	}
	if strings.Count(v4, "from 10.128.0.3 ") != 1 {
		t.Errorf("the older release's unmarked rule is still there beside the marked one:\n%s", v4)
	}
	for _, w := range []string{"5000:\tfrom fd00::3 lookup 100 proto 97", "5999:\tfrom all fwmark 0x3f0 lookup main proto 97"} {
		if !strings.Contains(v6, w) {
			t.Errorf("IPv6 rules lack %q:\n%s", w, v6)
		}
	}

	// The node leaves local gateway mode and the services go: the agent's
	// rules go, everyone else's stay.
	k.apply(t, nodeplan.NodeState{}, ApplyOptions{})
	v4, v6 = rules("-4"), rules("-6")
	if strings.Contains(v4+v6, "proto 97") {
		t.Errorf("the agent's rules left after it wants none:\n%s%s", v4, v6)
	}
	for _, w := range []string{"from 10.96.0.0/16 lookup 100", "from 10.128.0.7 lookup 100 proto 85", "fwmark 0x3f0 lookup main proto 85"} {
		if !strings.Contains(v4, w) {
			t.Errorf("someone else's rule %q was touched:\n%s", w, v4)
		}
	}

	for _, p := range nodeplan.OVNKubeRulePriorities {
		cfg := DefaultApplierConfig()
		cfg.RulePriority = p
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ovn-kubernetes'") {
			t.Errorf("rule priority %d: %v; want refused as ovn-kubernetes'", p, err)
		}
	}
}
