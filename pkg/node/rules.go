package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// netlinkFamily maps the family value to netlink's.
func netlinkFamily(f ipfamily.Family) int {
	if f == ipfamily.V6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// ownedRules are the kernel rules at the agent's priority: the ones that
// have the shape the agent writes (as IPRules), and any other rule at that
// priority (stray: someone else's rule in our priority, or a leftover of
// another shape), which is stale by definition.
type ownedRules struct {
	rules map[translate.IPRule]netlink.Rule
	stray []netlink.Rule
}

// listOwnedRules reads the rules of both families at priority.
func listOwnedRules(nl Netlink, priority int) (ownedRules, error) {
	own := ownedRules{rules: map[translate.IPRule]netlink.Rule{}}
	for _, f := range ipfamily.All {
		rules, err := nl.RuleList(netlinkFamily(f))
		if err != nil {
			return own, fmt.Errorf("list %s rules: %w", f.Name(), err)
		}
		for _, r := range rules {
			if r.Priority != priority {
				continue
			}
			if ir, ok := ruleFromKernel(f, r); ok {
				own.rules[ir] = r
			} else {
				own.stray = append(own.stray, r)
			}
		}
	}
	return own, nil
}

// ruleFromKernel reads a kernel rule as an IPRule when it has exactly the
// shape the agent writes: "from <host address> [sport N] lookup <table>"
// and no other selector or action.
func ruleFromKernel(f ipfamily.Family, r netlink.Rule) (translate.IPRule, bool) {
	if r.Src == nil || r.Dst != nil || r.Table <= 0 || r.Invert || r.Mark != 0 || r.Mask != nil ||
		r.IifName != "" || r.OifName != "" || r.Dport != nil || r.IPProto != 0 || r.UIDRange != nil ||
		r.Tos != 0 || r.Goto > 0 || r.TunID != 0 || r.SuppressPrefixlen > 0 || r.SuppressIfgroup > 0 ||
		(r.Type != 0 && r.Type != unix.RTN_UNICAST) {
		return translate.IPRule{}, false
	}
	addr, ok := netip.AddrFromSlice(r.Src.IP)
	if !ok {
		return translate.IPRule{}, false
	}
	addr = ipfamily.Canonical(addr)
	ones, _ := r.Src.Mask.Size()
	if ipfamily.Of(addr) != f || ones != addr.BitLen() {
		return translate.IPRule{}, false
	}
	ir := translate.IPRule{Family: f, Priority: r.Priority, Src: netip.PrefixFrom(addr, ones), Table: uint32(r.Table)}
	if r.Sport != nil {
		if r.Sport.Start != r.Sport.End || r.Sport.Start == 0 {
			return translate.IPRule{}, false
		}
		ir.SourcePort = r.Sport.Start
	}
	return ir, true
}

// kernelRule builds the netlink rule for an IPRule.
func kernelRule(ir translate.IPRule) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlinkFamily(ir.Family)
	r.Priority = ir.Priority
	r.Table = int(ir.Table)
	a := ir.Src.Addr()
	r.Src = &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(ir.Src.Bits(), a.BitLen())}
	if ir.SourcePort != 0 {
		r.Sport = netlink.NewRulePortRange(ir.SourcePort, ir.SourcePort)
	}
	return r
}

// addRules adds every wanted rule that is not there and returns the rules
// that exist afterwards (wanted ∩ (there ∪ added)); every failure is joined
// into the error, the other rules still go ahead.
func addRules(nl Netlink, own ownedRules, want []translate.IPRule) (reached []translate.IPRule, added int, err error) {
	var errs []error
	for _, ir := range want {
		if _, ok := own.rules[ir]; ok {
			reached = append(reached, ir)
			continue
		}
		if e := ignoreExists(nl.RuleAdd(kernelRule(ir))); e != nil {
			errs = append(errs, fmt.Errorf("add rule %s: %w", ir, e))
			continue
		}
		added++
		reached = append(reached, ir)
	}
	return reached, added, errors.Join(errs...)
}

// deleteRules deletes the owned rules not wanted, strays included, and
// returns how many went, the ones that did not and their errors.
func deleteRules(nl Netlink, own ownedRules, want []translate.IPRule) (deleted int, failed []translate.IPRule, strayFailed int, err error) {
	keep := make(map[translate.IPRule]bool, len(want))
	for _, ir := range want {
		keep[ir] = true
	}
	var errs []error
	for ir, kr := range own.rules {
		if keep[ir] {
			continue
		}
		if e := ignoreNotFound(nl.RuleDel(&kr)); e != nil {
			errs = append(errs, fmt.Errorf("delete rule %s: %w", ir, e))
			failed = append(failed, ir)
			continue
		}
		deleted++
	}
	for _, kr := range own.stray {
		if e := ignoreNotFound(nl.RuleDel(&kr)); e != nil {
			errs = append(errs, fmt.Errorf("delete rule %s: %w", kr, e))
			strayFailed++
			continue
		}
		deleted++
	}
	return deleted, failed, strayFailed, errors.Join(errs...)
}
