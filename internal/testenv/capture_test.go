package testenv

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
)

func arpFrame(op uint16, srcMAC string, sender, target netip.Addr) []byte {
	f := make([]byte, 14+28)
	mac, _ := net.ParseMAC(srcMAC)
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], 0x0806)
	binary.BigEndian.PutUint16(f[14:], 1)      // Ethernet
	binary.BigEndian.PutUint16(f[16:], 0x0800) // IPv4
	f[18], f[19] = 6, 4
	binary.BigEndian.PutUint16(f[20:], op)
	copy(f[22:28], mac)
	s, t := sender.As4(), target.As4()
	copy(f[28:32], s[:])
	copy(f[38:42], t[:])
	return f
}

func icmp6Frame(typ byte, srcMAC string, target netip.Addr) []byte {
	f := make([]byte, 14+40+24)
	mac, _ := net.ParseMAC(srcMAC)
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:], 0x86dd)
	f[20] = 58
	f[54] = typ
	t := target.As16()
	copy(f[62:78], t[:])
	return f
}

func TestAnnouncementParse(t *testing.T) {
	lb4, other4 := netip.MustParseAddr("172.18.0.100"), netip.MustParseAddr("172.18.0.1")
	lb6 := netip.MustParseAddr("fc00::100")
	const m = "02:00:00:00:00:01"
	for _, tc := range []struct {
		name  string
		frame []byte
		want  netip.Addr // invalid: no announcement
	}{
		{"ARP reply", arpFrame(2, m, lb4, other4), lb4},
		{"gratuitous ARP request", arpFrame(1, m, lb4, lb4), lb4},
		{"ARP request for another address", arpFrame(1, m, other4, lb4), netip.Addr{}},
		{"neighbour advertisement", icmp6Frame(136, m, lb6), lb6},
		{"neighbour solicitation", icmp6Frame(135, m, lb6), netip.Addr{}},
		{"short frame", arpFrame(2, m, lb4, other4)[:30], netip.Addr{}},
	} {
		a, ok := announcement(tc.frame)
		if ok != tc.want.IsValid() || (ok && (a.IP != tc.want || a.MAC != m)) {
			t.Errorf("%s: got %+v %v, want %v by %s", tc.name, a, ok, tc.want, m)
		}
	}
}
