package testenv

import (
	"encoding/binary"
	"net"
	"net/netip"
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
type Capture struct {
	mu    sync.Mutex
	srcs  map[netip.Addr]int
	first map[netip.Addr]Packet
	stop  atomic.Bool
	done  chan struct{}
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
		var src, dst netip.Addr
		proto := byte(0)
		switch binary.BigEndian.Uint16(buf[12:14]) {
		case 0x0800:
			if n >= 14+20 {
				src, dst, proto = netip.AddrFrom4([4]byte(buf[26:30])), netip.AddrFrom4([4]byte(buf[30:34])), buf[23]
			}
		case 0x86dd:
			if n >= 14+40 {
				src, dst, proto = netip.AddrFrom16([16]byte(buf[22:38])), netip.AddrFrom16([16]byte(buf[38:54])), buf[20]
			}
		}
		if src.IsValid() {
			c.mu.Lock()
			c.srcs[src]++
			if _, ok := c.first[src]; !ok {
				c.first[src] = Packet{At: time.Now(), Src: src, Dst: dst, Proto: proto}
			}
			c.mu.Unlock()
		}
	}
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
