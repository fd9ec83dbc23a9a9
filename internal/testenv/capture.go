package testenv

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Capture records the source address of every IP packet that arrives on a
// device inside a namespace (an AF_PACKET socket, like tcpdump): unlike an
// echo server it also sees packets nobody answers, such as a TCP SYN from a
// pod address that leaked out un-SNATed.
//
// It also records every address announcement it sees — ARP replies and
// gratuitous ARPs, IPv6 neighbour advertisements — with the MAC that made
// it, so a test can tell which node answers for a load-balancer IP.
type Capture struct {
	mu     sync.Mutex
	srcs   map[netip.Addr]int
	first  map[netip.Addr]Packet
	claims []Announcement
	stop   atomic.Bool
	done   chan struct{}
}

// Announcement is one ARP reply, gratuitous ARP or neighbour advertisement:
// MAC claims IP.
type Announcement struct {
	At  time.Time
	IP  netip.Addr
	MAC string
	// Solicited: a neighbour advertisement answering a solicitation (its
	// S flag); an unsolicited one announces a move.
	Solicited bool
}

// StartCapture starts recording on dev inside ns until t ends.
func StartCapture(t testing.TB, ns *NetNS, dev string) *Capture {
	t.Helper()
	c := &Capture{srcs: map[netip.Addr]int{}, first: map[netip.Addr]Packet{}, done: make(chan struct{})}
	var fd int
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err = syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(syscall.ETH_P_ALL)))
		if err != nil {
			return err
		}
		tv := syscall.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatalf("capture on %s in %s: %v", dev, ns.Name, err)
	}
	go c.loop(fd)
	t.Cleanup(c.Stop)
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) loop(fd int) {
	defer close(c.done)
	defer syscall.Close(fd)
	buf := make([]byte, 65536)
	for !c.stop.Load() {
		n, from, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil || n < 14 {
			continue
		}
		if ll, ok := from.(*syscall.SockaddrLinklayer); ok && ll.Pkttype == syscall.PACKET_OUTGOING {
			continue // our own replies
		}
		if a, ok := announcement(buf[:n]); ok {
			c.mu.Lock()
			c.claims = append(c.claims, a)
			c.mu.Unlock()
			continue
		}
		var src, dst netip.Addr
		proto, l4 := byte(0), 0
		switch binary.BigEndian.Uint16(buf[12:14]) {
		case 0x0800:
			if n >= 14+20 {
				src, dst, proto, l4 = netip.AddrFrom4([4]byte(buf[26:30])), netip.AddrFrom4([4]byte(buf[30:34])), buf[23], 14+int(buf[14]&0x0f)*4
			}
		case 0x86dd:
			if n >= 14+40 {
				src, dst, proto, l4 = netip.AddrFrom16([16]byte(buf[22:38])), netip.AddrFrom16([16]byte(buf[38:54])), buf[20], 14+40
			}
		}
		if src.IsValid() {
			p := Packet{At: time.Now(), Src: src, Dst: dst, Proto: proto, SrcMAC: net.HardwareAddr(slices.Clone(buf[6:12])).String()}
			if proto == 6 && n >= l4+14 {
				p.TCPFlags = buf[l4+13]
			}
			c.mu.Lock()
			c.srcs[src]++
			if _, ok := c.first[src]; !ok {
				c.first[src] = p
			}
			c.mu.Unlock()
		}
	}
}

// announcement parses an Ethernet frame as an ARP reply or gratuitous ARP
// (the sender claims its IP) or an ICMPv6 neighbour advertisement (its
// target link-layer address option claims the target address, else the
// frame's source: what a receiving neighbour cache records).
func announcement(f []byte) (Announcement, bool) {
	mac := func(b []byte) string { return net.HardwareAddr(b).String() }
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0806: // ARP for IPv4 over Ethernet
		if len(f) < 14+28 || binary.BigEndian.Uint16(f[14:16]) != 1 || binary.BigEndian.Uint16(f[16:18]) != 0x0800 {
			return Announcement{}, false
		}
		op := binary.BigEndian.Uint16(f[20:22])
		sender, target := netip.AddrFrom4([4]byte(f[28:32])), netip.AddrFrom4([4]byte(f[38:42]))
		if op == 2 || (op == 1 && sender == target) {
			return Announcement{At: time.Now(), IP: sender, MAC: mac(f[22:28])}, true
		}
	case 0x86dd: // ICMPv6 (next header 58), type 136
		if len(f) >= 14+40+24 && f[20] == 58 && f[54] == 136 {
			a := Announcement{At: time.Now(), IP: netip.AddrFrom16([16]byte(f[62:78])), MAC: mac(f[6:12]), Solicited: f[58]&0x40 != 0}
			if len(f) >= 14+40+24+8 && f[78] == 2 && f[79] == 1 {
				a.MAC = mac(f[80:86])
			}
			return a, true
		}
	}
	return Announcement{}, false
}

// Announcements returns the announcements of ip seen at or after since.
func (c *Capture) Announcements(ip netip.Addr, since time.Time) []Announcement {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Announcement
	for _, a := range c.claims {
		if a.IP == ip && !a.At.Before(since) {
			out = append(out, a)
		}
	}
	return out
}

// Sources returns every source address seen so far, with packet counts.
func (c *Capture) Sources() map[netip.Addr]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[netip.Addr]int, len(c.srcs))
	for a, n := range c.srcs {
		out[a] = n
	}
	return out
}

// Packet describes the first packet seen from a source.
type Packet struct {
	At       time.Time
	Src, Dst netip.Addr
	Proto    byte // IP protocol number (6 TCP, 17 UDP, 1/58 ICMP)
	SrcMAC   string
	TCPFlags byte // TCP's flags (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10)
}

// String describes the packet for a test's failure message.
func (p Packet) String() string {
	s := fmt.Sprintf("at %s %s → %s proto %d from MAC %s", p.At.Format("15:04:05.000"), p.Src, p.Dst, p.Proto, p.SrcMAC)
	if p.Proto == 6 {
		s += fmt.Sprintf(" TCP flags %#02x", p.TCPFlags)
	}
	return s
}

// First returns the first packet seen from src.
func (c *Capture) First(src netip.Addr) (Packet, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.first[src]
	return p, ok
}

// Stop ends the capture.
func (c *Capture) Stop() {
	if c.stop.CompareAndSwap(false, true) {
		<-c.done
	}
}
