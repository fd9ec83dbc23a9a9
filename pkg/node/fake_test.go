package node

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FakeNetlink is an in-memory Netlink for unit tests: rules behave like the
// kernel's (EEXIST on a duplicate add, ENOENT on deleting a rule that is
// not there), links are looked up by name, and the rule table renders like
// `ip rule`. Fail, when set, is asked before every write.
type FakeNetlink struct {
	mu     sync.Mutex
	rules  []netlink.Rule
	routes []netlink.Route
	links  map[string]netlink.Link
	// Fail returns the error a write ("add" or "del") of r must fail with,
	// or nil.
	Fail func(op string, r *netlink.Rule) error
	// Writes counts successful rule adds and deletes.
	Writes int
}

// NewFakeNetlink starts empty: no rules, routes or links.
func NewFakeNetlink() *FakeNetlink { return &FakeNetlink{links: map[string]netlink.Link{}} }

// AddLink makes a link known by its name (e.g. &netlink.Vrf{LinkAttrs:
// netlink.LinkAttrs{Name: "blue"}, Table: 100}).
func (f *FakeNetlink) AddLink(l netlink.Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[l.Attrs().Name] = l
}

// AddRoute puts a route into the fake's routing tables.
func (f *FakeNetlink) AddRoute(r netlink.Route) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes = append(f.routes, r)
}

func (f *FakeNetlink) RuleList(family int) ([]netlink.Rule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netlink.Rule
	for _, r := range f.rules {
		if r.Family == family {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *FakeNetlink) RuleAdd(r *netlink.Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail != nil {
		if err := f.Fail("add", r); err != nil {
			return err
		}
	}
	nr := *r
	if nr.Family == 0 {
		nr.Family = netlink.FAMILY_V4
		if nr.Src != nil && nr.Src.IP.To4() == nil {
			nr.Family = netlink.FAMILY_V6
		}
	}
	for _, have := range f.rules {
		// As the kernel: a rule differing only in its protocol is another.
		if sameRule(have, nr) && have.Protocol == nr.Protocol {
			return unix.EEXIST
		}
	}
	f.rules = append(f.rules, nr)
	slices.SortStableFunc(f.rules, func(a, b netlink.Rule) int { return a.Priority - b.Priority })
	f.Writes++
	return nil
}

func (f *FakeNetlink) RuleDel(r *netlink.Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail != nil {
		if err := f.Fail("del", r); err != nil {
			return err
		}
	}
	for i, have := range f.rules {
		// As the kernel: a request without a protocol matches any, the
		// first in the list.
		if sameRule(have, *r) && (r.Protocol == 0 || have.Protocol == r.Protocol) {
			f.rules = slices.Delete(f.rules, i, i+1)
			f.Writes++
			return nil
		}
	}
	return unix.ENOENT
}

func (f *FakeNetlink) RouteListTable(family, table int) ([]netlink.Route, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netlink.Route
	for _, r := range f.routes {
		if r.Table == table && (r.Family == family || r.Family == 0) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *FakeNetlink) LinkByName(name string) (netlink.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok {
		return l, nil
	}
	return nil, netlink.LinkNotFoundError{}
}

func (f *FakeNetlink) LinkByIndex(index int) (netlink.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.links {
		if l.Attrs().Index == index {
			return l, nil
		}
	}
	return nil, netlink.LinkNotFoundError{}
}

// sameRule compares the attributes the agent's rules (and the tests'
// foreign rules) use.
func sameRule(a, b netlink.Rule) bool {
	return a.Priority == b.Priority && a.Table == b.Table && ipnetString(a.Src) == ipnetString(b.Src) &&
		ipnetString(a.Dst) == ipnetString(b.Dst) && portString(a.Sport) == portString(b.Sport) &&
		a.Mark == b.Mark && a.IifName == b.IifName && a.OifName == b.OifName &&
		(a.Family == b.Family || a.Family == 0 || b.Family == 0)
}

func ipnetString(n *net.IPNet) string {
	if n == nil {
		return "all"
	}
	return n.String()
}

func portString(p *netlink.RulePortRange) string {
	if p == nil {
		return ""
	}
	if p.Start == p.End {
		return fmt.Sprintf("sport %d", p.Start)
	}
	return fmt.Sprintf("sport %d-%d", p.Start, p.End)
}

// Dump renders the rules like `ip -4 rule; ip -6 rule` (family first).
func (f *FakeNetlink) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		for _, r := range f.rules {
			if r.Family != fam {
				continue
			}
			name := "v4"
			if fam == netlink.FAMILY_V6 {
				name = "v6"
			}
			from := ipnetString(r.Src)
			if r.Src != nil {
				if ones, bits := r.Src.Mask.Size(); ones == bits {
					from = r.Src.IP.String()
				}
			}
			fmt.Fprintf(&b, "%s %d: from %s", name, r.Priority, from)
			if r.Mark != 0 {
				fmt.Fprintf(&b, " fwmark %#x", r.Mark)
			}
			if p := portString(r.Sport); p != "" {
				b.WriteString(" " + p)
			}
			fmt.Fprintf(&b, " lookup %d", r.Table)
			if r.Protocol != 0 {
				fmt.Fprintf(&b, " proto %d", r.Protocol)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
