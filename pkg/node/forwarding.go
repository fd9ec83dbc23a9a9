package node

import (
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"io/fs"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// forwardingPlan is what the host path needs switched on, decided before
// the nft transaction, without undoing a node's hardening:
//   - IPv4 forwarding is decided on the input interface: with ip_forward off
//     (a hardened node, or a new namespace), only the management port and
//     the interfaces the egress leaves by (default routes of the main table,
//     every route of a network's table) get conf.<if>.forwarding — traffic
//     between the node's other interfaces stays unforwarded;
//   - IPv6 forwards only with conf.all.forwarding (measured on this
//     kernel: per-interface forwarding forwards nothing). With it off the
//     agent turns it on behind its forward-guard chain, which drops every
//     forwarded IPv6 packet that does not enter or leave by the management
//     port. The chain, once there, records that IPv6 forwarding was off on
//     purpose, and stays.
type forwardingPlan struct {
	v4      []string // sysctls to set to 1
	v6      bool     // set net/ipv6/conf/all/forwarding to 1, after the guard exists
	v6Guard bool     // the forward-guard chain is wanted
}

func (a *Applier) planForwarding(want nodeplan.NodeState, have nftState) (forwardingPlan, error) {
	var p forwardingPlan
	_, p.v6Guard = have.chains[forwardChain]
	if !a.cfg.EnableForwarding {
		return p, nil
	}
	for _, f := range familiesOf(want) {
		on, err := sysctlOn(a.sysctl, forwardingSysctl(f))
		if err != nil {
			return p, err
		}
		if on {
			continue
		}
		if f == ipfamily.V6 {
			p.v6 = true
			p.v6Guard = p.v6Guard || a.cfg.MgmtPort != "" // without a management port nothing scopes the guard
			continue
		}
		links, err := a.egressLinks(want)
		if err != nil {
			return p, err
		}
		for _, l := range links {
			name := "net/ipv4/conf/" + l + "/forwarding"
			on, err := sysctlOn(a.sysctl, name)
			if errors.Is(err, fs.ErrNotExist) {
				continue // the interface is gone (or not there yet): the next sync sees it
			}
			if err != nil {
				return p, err
			}
			if !on {
				p.v4 = append(p.v4, name)
			}
		}
	}
	return p, nil
}

// egressLinks are the IPv4 interfaces the host path uses: the management
// port, the default routes' of the main table, and every route's of the
// tables the rules point to.
func (a *Applier) egressLinks(want nodeplan.NodeState) ([]string, error) {
	names := map[string]bool{}
	if a.cfg.MgmtPort != "" {
		names[a.cfg.MgmtPort] = true
	}
	tables := map[int]bool{unix.RT_TABLE_MAIN: true}
	for _, r := range want.Rules {
		if r.Family == ipfamily.V4 {
			tables[int(r.Table)] = true
		}
	}
	for t := range tables {
		routes, err := a.nl.RouteListTable(unix.AF_INET, t)
		if err != nil {
			return nil, fmt.Errorf("routes of table %d: %w", t, err)
		}
		for _, r := range routes {
			if t == unix.RT_TABLE_MAIN && r.Dst != nil && !isDefault(r) {
				continue
			}
			idx := []int{r.LinkIndex}
			for _, nh := range r.MultiPath {
				idx = append(idx, nh.LinkIndex)
			}
			for _, i := range idx {
				if i <= 0 {
					continue
				}
				l, err := a.nl.LinkByIndex(i)
				if err != nil {
					continue // gone since the dump
				}
				names[l.Attrs().Name] = true
			}
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func isDefault(r netlink.Route) bool {
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

func sysctlOn(s Sysctl, name string) (bool, error) {
	v, err := s.Get(name)
	if err != nil {
		return false, err
	}
	return v == "1", nil
}

// setOn writes 1 to each sysctl and returns the names written.
func setOn(s Sysctl, names ...string) ([]string, error) {
	var done []string
	for _, n := range names {
		if err := s.Set(n, "1"); err != nil {
			return done, err
		}
		done = append(done, n)
	}
	return done, nil
}
