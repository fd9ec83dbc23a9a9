package node

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Netlink is the part of the kernel's routing netlink API the agent uses:
// policy rules (read, add, delete), routes of one table (read, for the
// network diagnostics) and links by name (VRF name → table). Declared here,
// where it is consumed; *netlink.Handle satisfies it through kernelNetlink,
// FakeNetlink in tests.
type Netlink interface {
	RuleList(family int) ([]netlink.Rule, error)
	RuleAdd(rule *netlink.Rule) error
	RuleDel(rule *netlink.Rule) error
	RouteListTable(family int, table int) ([]netlink.Route, error)
	LinkByName(name string) (netlink.Link, error)
	LinkByIndex(index int) (netlink.Link, error)
}

// kernelNetlink is Netlink over a netlink handle bound to a namespace.
type kernelNetlink struct{ h *netlink.Handle }

// NewKernelNetlink opens a netlink handle in ns.
func NewKernelNetlink(ns *Namespace) (Netlink, error) {
	h, err := netlink.NewHandleAt(ns.Handle())
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %q: %w", ns.Name(), err)
	}
	return kernelNetlink{h: h}, nil
}

func (k kernelNetlink) RuleList(family int) ([]netlink.Rule, error) {
	rules, err := k.h.RuleList(family)
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		// The dump raced a change; one retry gives a consistent view.
		rules, err = k.h.RuleList(family)
	}
	return rules, err
}

func (k kernelNetlink) RuleAdd(r *netlink.Rule) error { return k.h.RuleAdd(r) }
func (k kernelNetlink) RuleDel(r *netlink.Rule) error { return k.h.RuleDel(r) }

func (k kernelNetlink) RouteListTable(family, table int) ([]netlink.Route, error) {
	routes, err := k.h.RouteListFiltered(family, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		routes, err = k.h.RouteListFiltered(family, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	}
	return routes, err
}

func (k kernelNetlink) LinkByName(name string) (netlink.Link, error) { return k.h.LinkByName(name) }

func (k kernelNetlink) LinkByIndex(index int) (netlink.Link, error) { return k.h.LinkByIndex(index) }

// Idempotent writes: "exists" on add and "not found" on delete mean the
// kernel is already where the agent wants it. Decided on the errno, never
// on message text.

func ignoreExists(err error) error {
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

func ignoreNotFound(err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}
