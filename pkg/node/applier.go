package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"sigs.k8s.io/knftables"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// ApplierConfig tunes the Applier.
type ApplierConfig struct {
	// RulePriority is the ip rule priority the agent's rules have, in both
	// families.
	RulePriority int
	// RuleProtocol marks the agent's ip rules (the rule's protocol, as
	// `ip rule ... proto N`): a rule is the agent's when it carries it —
	// whatever its priority or shape — and no other rule is ever changed or
	// deleted (ovn-kubernetes marks its own objects 84 and 85). A rule of
	// the agent's shape at its priority with no protocol is an older
	// release's, replaced by a marked one.
	RuleProtocol uint8
	// MgmtPort is the management port; traffic leaving through it goes back
	// into the cluster and is never SNATed. "" disables that exception.
	MgmtPort string
	// EnableForwarding turns on IPv4/IPv6 forwarding for the families the
	// plan uses (the host path forwards rerouted pod traffic), keeping a
	// node that does not forward from forwarding anything else
	// (forwarding.go).
	EnableForwarding bool
	// WithdrawnHold is how long an endpoint whose SNAT was removed stays in
	// the withdrawn sets (its unSNATed packets dropped); every removal
	// restarts it.
	WithdrawnHold time.Duration
}

// ifNameChars are the characters accepted in --mgmt-port (it becomes part
// of an nft rule).
const ifNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@:"

// DefaultApplierConfig: priority 5000, ovn-k8s-mp0, forwarding on, a
// withdrawn endpoint guarded for WithdrawnHold.
func DefaultApplierConfig() ApplierConfig {
	return ApplierConfig{RulePriority: nodeplan.DefaultRulePriority, RuleProtocol: DefaultRuleProtocol, MgmtPort: "ovn-k8s-mp0",
		EnableForwarding: true, WithdrawnHold: WithdrawnHold}
}

// DefaultRuleProtocol is the protocol value the agent's ip rules carry:
// none of the kernel's, iproute2's rt_protos or ovn-kubernetes' (84, 85).
const DefaultRuleProtocol = 97

// Validate checks the configuration.
func (c ApplierConfig) Validate() error {
	if c.RulePriority <= 0 || c.RulePriority >= 32766 {
		return fmt.Errorf("rule priority %d: want 1..32765 (0 is the local table, 32766/32767 main and default)", c.RulePriority)
	}
	if slices.Contains(nodeplan.OVNKubeRulePriorities, c.RulePriority) {
		return fmt.Errorf("rule priority %d is ovn-kubernetes' (it owns %v and deletes rules it does not know there): choose another",
			c.RulePriority, nodeplan.OVNKubeRulePriorities)
	}
	if c.RuleProtocol == 0 || c.RuleProtocol == ovnKubeProtocolOVN || c.RuleProtocol == ovnKubeProtocol {
		return fmt.Errorf("rule protocol %d: want 1..255 other than ovn-kubernetes' %d and %d", c.RuleProtocol, ovnKubeProtocolOVN, ovnKubeProtocol)
	}
	if len(c.MgmtPort) > 15 || strings.TrimLeft(c.MgmtPort, ifNameChars) != "" {
		return fmt.Errorf("management port %q: want an interface name (at most 15 of %s)", c.MgmtPort, ifNameChars)
	}
	if c.WithdrawnHold < time.Second {
		return fmt.Errorf("withdrawn hold %v: want at least 1s (a withdrawn endpoint's packets are dropped that long)", c.WithdrawnHold)
	}
	return nil
}

// Applier takes the node's owned state — ip rules at its priority and the
// `inet ovn-egress` nft table — to a desired translate.NodeState. It lists
// what exists, diffs, adds before it deletes, and never touches rules at
// other priorities, other nft tables or ovn-kubernetes' tables. It keeps no
// memory of what it wrote: every Apply reads the kernel back.
type Applier struct {
	cfg    ApplierConfig
	nl     Netlink
	nft    knftables.Interface
	sysctl Sysctl
	log    *logrus.Entry
	reader *TableReader // set: the table is read in one nft run
}

// NewApplier builds an Applier. nft must be bound to family inet and table
// TableName (knftables.New(knftables.InetFamily, node.TableName)).
func NewApplier(cfg ApplierConfig, nl Netlink, nft knftables.Interface, sysctl Sysctl, log *logrus.Entry) (*Applier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Applier{cfg: cfg, nl: nl, nft: nft, sysctl: sysctl, log: log}, nil
}

// ReadTableWith makes Apply read the agent's table in one nft run (r)
// instead of one run per object through knftables (which the fake used by
// unit tests needs).
func (a *Applier) ReadTableWith(r TableReader) *Applier {
	a.reader = &r
	return a
}

// GuardDrops is how many packets the leak guard dropped since its table
// was created, by rule: each would have left the node with a pod address.
func (a *Applier) GuardDrops(ctx context.Context) (GuardDrops, error) { return guardDrops(ctx, a.nft) }

// ApplyOptions select a phase of an ordered sync.
type ApplyOptions struct {
	// KeepStale adds and updates only; nothing is deleted. The controller
	// uses it to program new state, publish the report, wait, then delete.
	KeepStale bool
}

// Result is what an Apply reached.
type Result struct {
	// Reached is the owned state after the apply: what was there and is
	// still wanted or kept, plus what was added.
	Reached nodeplan.NodeState
	// Added and Deleted count rules and map elements written; Chains says
	// the table structure was (re)written.
	Added, Deleted int
	Chains         bool
	// Forwarding lists the sysctls turned on.
	Forwarding []string
	// Stale counts the owned rules and elements nobody wants that are still
	// there (left by KeepStale, or failed to delete).
	Stale int
}

// Changed reports whether the apply wrote anything.
func (r Result) Changed() bool {
	return r.Added > 0 || r.Deleted > 0 || r.Chains || len(r.Forwarding) > 0
}

// Apply takes the owned state to want. Errors of single rules do not stop
// the others; the returned Result says what was reached either way.
func (a *Applier) Apply(ctx context.Context, want nodeplan.NodeState, opts ApplyOptions) (Result, error) {
	want = nodeplan.NodeState{Rules: slices.Clone(want.Rules), SNAT: slices.Clone(want.SNAT),
		NoSNAT: slices.Clone(want.NoSNAT), NodeIPs: slices.Clone(want.NodeIPs), BypassRule: want.BypassRule}.Normalize()
	for _, r := range want.Rules {
		if r.Priority != a.cfg.RulePriority {
			return Result{}, fmt.Errorf("rule %s is not at the owned priority %d", r, a.cfg.RulePriority)
		}
	}
	var res Result
	rules, err := listOwnedRules(a.nl, a.cfg.RulePriority, a.cfg.RuleProtocol)
	if err != nil {
		return res, err
	}
	var nft nftState
	if a.reader != nil {
		nft, err = a.reader.read(ctx)
	} else {
		nft, err = listNFT(ctx, a.nft)
	}
	if err != nil {
		return res, err
	}
	res.Reached = existing(rules, nft)

	const fwdHint = "enable forwarding (switch it on on the node, or run with --enable-forwarding=false if something else does)"
	fwd, err := a.planForwarding(want, nft)
	if err == nil {
		res.Forwarding, err = setOn(a.sysctl, fwd.v4...)
	}
	if err != nil {
		return res, fmt.Errorf("%s: %w", fwdHint, err)
	}

	// Add phase: nft first (one atomic transaction, the forward guard in
	// it), then IPv6 forwarding behind the guard, then rules.
	p := planNFT(a.nft, nft, want, a.cfg, fwd.v6Guard)
	if p.structure || len(p.upserted) > 0 {
		if err := a.nft.Run(ctx, p.adds); err != nil {
			return res, fmt.Errorf("nft add transaction: %w", err)
		}
		res.Chains = p.structure
		res.Added += len(p.upserted)
		for _, e := range p.upserted {
			nft.elements[e.Endpoint] = e
		}
	}
	if fwd.v6 {
		done, err := setOn(a.sysctl, forwardingSysctl(ipfamily.V6))
		res.Forwarding = append(res.Forwarding, done...)
		if err != nil {
			return res, fmt.Errorf("%s: %w", fwdHint, err)
		}
	}
	res.Reached.NoSNAT, res.Reached.NodeIPs = want.NoSNAT, want.NodeIPs
	res.Reached.SNAT = elementsOf(nft)
	reachedRules, added, addErr := addRules(a.nl, rules, want.Rules, a.cfg.RuleProtocol)
	res.Added += added
	if want.BypassRule {
		n, err := addBypass(a.nl, a.cfg.RuleProtocol)
		res.Added += n
		addErr = errors.Join(addErr, err)
	}
	res.Reached.BypassRule = want.BypassRule && addErr == nil
	res.Reached.Rules = mergeRules(reachedRules, staleRules(rules, want))
	if addErr != nil || opts.KeepStale {
		res.Stale = len(staleRules(rules, want)) + len(rules.stray) + len(p.removed)
		res.Reached = res.Reached.Normalize()
		return res, addErr
	}

	// Delete phase: rules, then the nft elements nobody wants.
	deleted, failed, strayFailed, delErr := deleteRules(a.nl, rules, want.Rules)
	res.Deleted += deleted
	if !want.BypassRule {
		n, err := deleteBypass(a.nl, a.cfg.RuleProtocol)
		res.Deleted += n
		delErr = errors.Join(delErr, err)
	}
	res.Reached.Rules = mergeRules(reachedRules, failed)
	if len(p.removed) > 0 {
		if err := a.nft.Run(ctx, p.deletes); err != nil {
			delErr = errors.Join(delErr, fmt.Errorf("nft delete transaction: %w", err))
		} else {
			res.Deleted += len(p.removed)
			for _, e := range p.removed {
				delete(nft.elements, e.Endpoint)
			}
		}
	}
	res.Reached.SNAT = elementsOf(nft)
	res.Reached = res.Reached.Normalize()
	res.Stale = len(failed) + strayFailed
	for _, e := range p.removed {
		if _, ok := nft.elements[e.Endpoint]; ok {
			res.Stale++
		}
	}
	return res, delErr
}

// existing is the owned state as listed, before any write.
func existing(rules ownedRules, nft nftState) nodeplan.NodeState {
	st := nodeplan.NodeState{SNAT: elementsOf(nft)}
	for r := range rules.rules {
		st.Rules = append(st.Rules, r)
	}
	return st.Normalize()
}

// elementsOf lists the map elements nft holds.
func elementsOf(nft nftState) []nodeplan.SNATElement {
	out := make([]nodeplan.SNATElement, 0, len(nft.elements))
	for _, e := range nft.elements {
		out = append(out, e)
	}
	return out
}

func staleRules(rules ownedRules, want nodeplan.NodeState) []nodeplan.IPRule {
	wanted := make(map[nodeplan.IPRule]bool, len(want.Rules))
	for _, r := range want.Rules {
		wanted[r] = true
	}
	var out []nodeplan.IPRule
	for r := range rules.rules {
		if !wanted[r] {
			out = append(out, r)
		}
	}
	return out
}

func mergeRules(a, b []nodeplan.IPRule) []nodeplan.IPRule {
	return append(slices.Clone(a), b...)
}

// familiesOf lists the families the state programs something for.
func familiesOf(st nodeplan.NodeState) []ipfamily.Family {
	var out []ipfamily.Family
	for _, f := range ipfamily.All {
		used := slices.ContainsFunc(st.SNAT, func(e nodeplan.SNATElement) bool { return e.Family == f }) ||
			slices.ContainsFunc(st.Rules, func(r nodeplan.IPRule) bool { return r.Family == f })
		if used {
			out = append(out, f)
		}
	}
	return out
}
