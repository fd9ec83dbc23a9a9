package testenv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Echo is a TCP and UDP server in a namespace that answers every connection
// or datagram with "seen=<source address>:<port>": the server itself says
// which source address it saw. A TCP connection is answered at once and
// then once per line it sends, until it is idle for 5 s.
type Echo struct {
	Port int
	mu   sync.Mutex
	seen []netip.Addr
	tcp  []net.Listener
	udp  []net.PacketConn
}

// StartEcho listens on each address at port, TCP and UDP, inside ns.
func StartEcho(t testing.TB, ns *NetNS, port int, addrs ...netip.Addr) *Echo {
	t.Helper()
	e := &Echo{Port: port}
	err := ns.Do(func() error {
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a, uint16(port)).String()
			l, err := net.Listen("tcp", ap)
			if err != nil {
				return err
			}
			p, err := net.ListenPacket("udp", ap)
			if err != nil {
				return err
			}
			e.tcp, e.udp = append(e.tcp, l), append(e.udp, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("echo in %s: %v", ns.Name, err)
	}
	for _, l := range e.tcp {
		go e.serveTCP(l)
	}
	for _, p := range e.udp {
		go e.serveUDP(p)
	}
	t.Cleanup(e.Close)
	return e
}

func (e *Echo) record(a netip.Addr) {
	e.mu.Lock()
	e.seen = append(e.seen, a.Unmap())
	e.mu.Unlock()
}

func (e *Echo) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		e.record(ap.Addr())
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "seen=%s\n", ap)
			// A client that keeps the connection open gets an answer per
			// line it sends (a long-lived connection across a failover).
			r := bufio.NewReader(c)
			for {
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := fmt.Fprintf(c, "seen=%s\n", ap); err != nil {
					return
				}
			}
		}()
	}
}

func (e *Echo) serveUDP(p net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		_, from, err := p.ReadFrom(buf)
		if err != nil {
			return
		}
		ap := from.(*net.UDPAddr).AddrPort()
		e.record(ap.Addr())
		p.WriteTo([]byte(fmt.Sprintf("seen=%s\n", ap)), from)
	}
}

// Seen returns every source address the server has seen, in order.
func (e *Echo) Seen() []netip.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}

// Close stops the server.
func (e *Echo) Close() {
	for _, l := range e.tcp {
		l.Close()
	}
	for _, p := range e.udp {
		p.Close()
	}
}

// Ask connects from inside ns to dst over proto ("tcp" or "udp") and
// returns the source address the echo server reports having seen.
func Ask(ns *NetNS, proto string, dst netip.AddrPort, timeout time.Duration) (netip.Addr, error) {
	var c net.Conn
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := ns.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, proto, dst.String())
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if proto == "udp" {
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return netip.Addr{}, err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return netip.Addr{}, err
	}
	return ParseSeen(line)
}

// ParseSeen reads an Echo answer ("seen=<address>:<port>") and returns the
// source address the server saw.
func ParseSeen(line string) (netip.Addr, error) {
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(strings.TrimSpace(line), "seen="))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bad answer %q: %w", line, err)
	}
	return ap.Addr().Unmap(), nil
}

// AskUntil repeats Ask until it succeeds with a source in want (or any
// source when want is empty) or the deadline passes; it returns the last
// source seen and how long it took.
func AskUntil(ns *NetNS, proto string, dst netip.AddrPort, deadline time.Duration, want ...netip.Addr) (netip.Addr, time.Duration, error) {
	start := time.Now()
	var last netip.Addr
	var err error
	for time.Since(start) < deadline {
		last, err = Ask(ns, proto, dst, 500*time.Millisecond)
		if err == nil && (len(want) == 0 || slices.Contains(want, last)) {
			return last, time.Since(start), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err == nil {
		err = fmt.Errorf("source %s, want one of %v", last, want)
	}
	return last, time.Since(start), err
}

// sendUnsolicitedNA sends an unsolicited, overriding neighbour
// advertisement for ip (assigned to dev) to all nodes: the kernel sends none
// when an address is added (reference/hostpath.md §6). Call it inside the
// namespace (NetNS.Do).
func sendUnsolicitedNA(dev string, ip netip.Addr) error {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return err
	}
	if len(ifi.HardwareAddr) != 6 {
		return errors.New("no ethernet address on " + dev)
	}
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_RAW, syscall.IPPROTO_ICMPV6)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_MULTICAST_HOPS, 255); err != nil {
		return err
	}
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_MULTICAST_IF, ifi.Index); err != nil {
		return err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet6{Addr: ip.As16()}); err != nil {
		return fmt.Errorf("bind %s: %w", ip, err)
	}
	// ICMPv6 type 136, code 0, checksum (filled in by the kernel), flags
	// Override, target, option 2 (target link-layer address).
	msg := make([]byte, 32)
	msg[0] = 136
	binary.BigEndian.PutUint32(msg[4:], 0x20000000)
	t := ip.As16()
	copy(msg[8:24], t[:])
	msg[24], msg[25] = 2, 1
	copy(msg[26:32], ifi.HardwareAddr)
	all := netip.MustParseAddr("ff02::1").As16()
	return syscall.Sendto(fd, msg, 0, &syscall.SockaddrInet6{Addr: all, ZoneId: uint32(ifi.Index)})
}
