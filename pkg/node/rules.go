package node

import (
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// netlinkFamily maps the family value to netlink's.
func netlinkFamily(f ipfamily.Family) int {
	if f == ipfamily.V6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// ownedRules are the agent's kernel rules: the ones of the shape it writes
// at its priority (as IPRules), and the stale rest (stray): its own marked
// rules of another shape or priority (a --rule-priority changed), and rules
// of its shape at its priority without any protocol — an older release's,
// which a marked rule replaces. Every other rule — another protocol, or
// unmarked and of another shape, whatever its priority — is someone else's
// and is never listed here, so never deleted. The bypass rule has its own
// lister (bypass.go).
type ownedRules struct {
	rules map[nodeplan.IPRule]netlink.Rule
	stray []netlink.Rule
}

// Protocol values ovn-kubernetes marks its kernel objects with (RTPROT_OVN
// on routes, and its own for EgressIP addresses and VRF routes).
const (
	ovnKubeProtocolOVN = 84
	ovnKubeProtocol    = 85
)

// listOwnedRules reads the agent's rules of both families: priority and
// proto are its own (ApplierConfig).
func listOwnedRules(nl Netlink, priority int, proto uint8) (ownedRules, error) {
	own := ownedRules{rules: map[nodeplan.IPRule]netlink.Rule{}}
	for _, f := range ipfamily.All {
		rules, err := nl.RuleList(netlinkFamily(f))
		if err != nil {
			return own, fmt.Errorf("list %s rules: %w", f.Name(), err)
		}
		for _, r := range rules {
			ir, shaped := ruleFromKernel(f, r)
			switch {
			case r.Protocol == proto && isBypassRule(r):
				// bypass.go's
			case r.Protocol == proto && r.Priority == priority && shaped:
				own.rules[ir] = r
			case r.Protocol == proto:
				own.stray = append(own.stray, r)
			case r.Protocol == unix.RTPROT_UNSPEC && r.Priority == priority && shaped:
				// An older release's: deleted without a protocol, which the
				// kernel matches against the first rule of that shape — this
				// one, added before any marked copy of it.
				own.stray = append(own.stray, r)
			}
		}
	}
	return own, nil
}

// ruleFromKernel reads a kernel rule as an IPRule when it has exactly the
// shape the agent writes: "from <host address> [sport N] lookup <table>"
// and no other selector or action.
func ruleFromKernel(f ipfamily.Family, r netlink.Rule) (nodeplan.IPRule, bool) {
	if r.Src == nil || r.Dst != nil || r.Table <= 0 || r.Invert || r.Mark != 0 || r.Mask != nil ||
		r.IifName != "" || r.OifName != "" || r.Dport != nil || r.IPProto != 0 || r.UIDRange != nil ||
		r.Tos != 0 || r.Goto > 0 || r.TunID != 0 || r.SuppressPrefixlen > 0 || r.SuppressIfgroup > 0 ||
		(r.Type != 0 && r.Type != unix.RTN_UNICAST) {
		return nodeplan.IPRule{}, false
	}
	addr, ok := netip.AddrFromSlice(r.Src.IP)
	if !ok {
		return nodeplan.IPRule{}, false
	}
	addr = ipfamily.Canonical(addr)
	ones, _ := r.Src.Mask.Size()
	if ipfamily.Of(addr) != f || ones != addr.BitLen() {
		return nodeplan.IPRule{}, false
	}
	ir := nodeplan.IPRule{Family: f, Priority: r.Priority, Src: netip.PrefixFrom(addr, ones), Table: uint32(r.Table)}
	if r.Sport != nil {
		if r.Sport.Start != r.Sport.End || r.Sport.Start == 0 {
			return nodeplan.IPRule{}, false
		}
		ir.SourcePort = r.Sport.Start
	}
	return ir, true
}

// kernelRule builds the netlink rule for an IPRule, marked proto.
func kernelRule(ir nodeplan.IPRule, proto uint8) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlinkFamily(ir.Family)
	r.Protocol = proto
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
func addRules(nl Netlink, own ownedRules, want []nodeplan.IPRule, proto uint8) (reached []nodeplan.IPRule, added int, err error) {
	var errs []error
	for _, ir := range want {
		if _, ok := own.rules[ir]; ok {
			reached = append(reached, ir)
			continue
		}
		if e := ignoreExists(nl.RuleAdd(kernelRule(ir, proto))); e != nil {
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
func deleteRules(nl Netlink, own ownedRules, want []nodeplan.IPRule) (deleted int, failed []nodeplan.IPRule, strayFailed int, err error) {
	keep := make(map[nodeplan.IPRule]bool, len(want))
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
