package node

import (
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"

	"github.com/vishvananda/netlink"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The local-gateway bypass rule (translate.FwMarkRulePriority): "fwmark
// 0x3f0 lookup main", in both families, marked with the agent's protocol.
// ovn-kubernetes installs the same rule with its own EgressIP on (and with
// its PR #6090 from its EgressService controller too); two copies with
// different protocols are allowed by the kernel and route alike, and each
// side deletes only its own.

// isBypassRule reports whether r has the bypass rule's shape.
func isBypassRule(r netlink.Rule) bool {
	return r.Priority == nodeplan.FwMarkRulePriority && r.Mark == nodeplan.NodeSNATMark &&
		(r.Mask == nil || *r.Mask == 0xffffffff) && r.Table == unixMainTable && r.Src == nil && r.Dst == nil && !r.Invert
}

// unixMainTable is RT_TABLE_MAIN.
const unixMainTable = 254

func bypassRule(f ipfamily.Family, proto uint8) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlinkFamily(f)
	r.Priority = nodeplan.FwMarkRulePriority
	r.Mark = nodeplan.NodeSNATMark
	r.Table = unixMainTable
	r.Protocol = proto
	return r
}

// ownBypass lists the agent's bypass rules, by family.
func ownBypass(nl Netlink, proto uint8) (map[ipfamily.Family][]netlink.Rule, error) {
	out := map[ipfamily.Family][]netlink.Rule{}
	for _, f := range ipfamily.All {
		rules, err := nl.RuleList(netlinkFamily(f))
		if err != nil {
			return nil, fmt.Errorf("list %s rules: %w", f.Name(), err)
		}
		for _, r := range rules {
			if r.Protocol == proto && isBypassRule(r) {
				out[f] = append(out[f], r)
			}
		}
	}
	return out, nil
}

// addBypass adds the bypass rule of each family that lacks the agent's.
func addBypass(nl Netlink, proto uint8) (int, error) {
	have, err := ownBypass(nl, proto)
	if err != nil {
		return 0, err
	}
	added := 0
	var errs []error
	for _, f := range ipfamily.All {
		if len(have[f]) > 0 {
			continue
		}
		if err := ignoreExists(nl.RuleAdd(bypassRule(f, proto))); err != nil {
			errs = append(errs, fmt.Errorf("add the %s local-gateway bypass rule: %w", f.Name(), err))
			continue
		}
		added++
	}
	return added, errors.Join(errs...)
}

// deleteBypass deletes the agent's bypass rules (a node that left local
// gateway mode); anyone else's stay.
func deleteBypass(nl Netlink, proto uint8) (int, error) {
	have, err := ownBypass(nl, proto)
	if err != nil {
		return 0, err
	}
	deleted := 0
	var errs []error
	for _, rules := range have {
		for _, r := range rules {
			if err := ignoreNotFound(nl.RuleDel(&r)); err != nil {
				errs = append(errs, fmt.Errorf("delete the local-gateway bypass rule: %w", err))
				continue
			}
			deleted++
		}
	}
	return deleted, errors.Join(errs...)
}
