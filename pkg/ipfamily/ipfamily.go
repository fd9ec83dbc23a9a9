// Package ipfamily makes the IP address family a value, so that IPv4 and IPv6
// are handled by one code path: loop over the families present and derive
// match fields, wildcard prefixes and labels from the value.
package ipfamily

import (
	"fmt"
	"net/netip"
)

// Family is an IP address family. Its string form ("v4", "v6") is the value of
// the ip-family external_id on the NB rows ovn-egress owns.
type Family string

const (
	V4 Family = "v4"
	V6 Family = "v6"
)

// All lists both families, IPv4 first; iteration order everywhere follows it.
var All = []Family{V4, V6}

// Of returns the family of an address (IPv4-mapped IPv6 counts as IPv4).
func Of(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return V4
	}
	return V6
}

// OfPrefix returns the family of a prefix.
func OfPrefix(p netip.Prefix) Family { return Of(p.Addr()) }

// Parse accepts "v4"/"v6" (and "ipv4"/"ipv6", "4"/"6").
func Parse(s string) (Family, error) {
	switch s {
	case "v4", "ipv4", "4", "IPv4":
		return V4, nil
	case "v6", "ipv6", "6", "IPv6":
		return V6, nil
	}
	return "", fmt.Errorf("unknown IP family %q", s)
}

// OVNMatch is the OVN match-field prefix of the family: "ip4" or "ip6".
func (f Family) OVNMatch() string {
	if f == V6 {
		return "ip6"
	}
	return "ip4"
}

// Bits is the address length in bits.
func (f Family) Bits() int {
	if f == V6 {
		return 128
	}
	return 32
}

// Any is the family's default route prefix (0.0.0.0/0 or ::/0).
func (f Family) Any() netip.Prefix {
	if f == V6 {
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
}

// Name is the human form: "IPv4" or "IPv6".
func (f Family) Name() string {
	if f == V6 {
		return "IPv6"
	}
	return "IPv4"
}

// Canonical returns the address without zone and with IPv4-mapped IPv6
// unmapped, so that one address always has one spelling.
func Canonical(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// Nth returns the address n after the prefix's network address (n=1: the
// router address, n=2: ovn-kubernetes' management-port address).
func Nth(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}
