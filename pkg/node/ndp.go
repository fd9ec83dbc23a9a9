package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// neighborAdvertisement is the ICMPv6 body of an unsolicited neighbour
// advertisement of target (RFC 4861 §4.4, §7.2.6): type 136, code 0, the
// checksum left to the kernel, the Override flag (receivers replace the
// link-layer address they have), and the target link-layer address option
// carrying mac — the address a receiving neighbour cache records.
func neighborAdvertisement(target netip.Addr, mac net.HardwareAddr) []byte {
	msg := make([]byte, 32)
	msg[0] = 136
	binary.BigEndian.PutUint32(msg[4:8], 1<<29) // flags: Override
	t := target.As16()
	copy(msg[8:24], t[:])
	msg[24], msg[25] = 2, 1 // option: target link-layer address, 8 bytes
	copy(msg[26:32], mac)
	return msg
}

// sendNeighborAdvertisement sends an unsolicited neighbour advertisement of
// target to all nodes (ff02::1) out of dev, in the calling thread's network
// namespace. target need not be an address of the host: an egress IP lives
// on OVN's gateway router, so the socket binds it with IPV6_FREEBIND. The
// frame leaves with dev's own MAC as source; mac, in the option, is what
// the neighbours learn (in shared gateway mode both are the bridge's).
func sendNeighborAdvertisement(dev string, target netip.Addr, mac net.HardwareAddr) error {
	if !target.Is6() || target.Is4In6() {
		return fmt.Errorf("neighbour advertisement of %s: not an IPv6 address", target)
	}
	if len(mac) != 6 {
		return errors.New("neighbour advertisement: no Ethernet address")
	}
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return fmt.Errorf("icmpv6 socket: %w", err)
	}
	defer unix.Close(fd)
	for _, o := range []struct{ opt, v int }{
		{unix.IPV6_FREEBIND, 1},
		{unix.IPV6_MULTICAST_HOPS, 255}, // neighbour discovery requires it
		{unix.IPV6_MULTICAST_IF, ifi.Index},
	} {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, o.opt, o.v); err != nil {
			return fmt.Errorf("icmpv6 socket option %d: %w", o.opt, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: target.As16(), ZoneId: uint32(ifi.Index)}); err != nil {
		return fmt.Errorf("bind %s: %w", target, err)
	}
	all := &unix.SockaddrInet6{Addr: netip.IPv6LinkLocalAllNodes().As16(), ZoneId: uint32(ifi.Index)}
	if err := unix.Sendto(fd, neighborAdvertisement(target, mac), 0, all); err != nil {
		return fmt.Errorf("send neighbour advertisement of %s on %s: %w", target, dev, err)
	}
	return nil
}

// interfaceOn returns the name of the interface holding primary's address
// or, when none does, the first holding another address of its network
// (the node's primary address may live on a bridge the agent does not see
// it on), in the calling thread's network namespace.
func interfaceOn(primary netip.Prefix) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	network := primary.Masked()
	var near string
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			p, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(p.IP)
			switch ip = ip.Unmap(); {
			case !ok:
			case ip == primary.Addr():
				return ifi.Name, nil
			case near == "" && network.Contains(ip):
				near = ifi.Name
			}
		}
	}
	if near == "" {
		return "", fmt.Errorf("no interface on %s", primary)
	}
	return near, nil
}
