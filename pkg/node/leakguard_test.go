package node

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// TestNodeKernelLeakGuard: a packet conntrack marks invalid skips the nat
// chains and would leave the node with the pod's address
// (reference/hostpath.md §1 and pitfall 4). The agent's leak guard drops
// it. A lone TCP ACK with nf_conntrack_tcp_loose=0 is such a packet: the
// test shows it leaking once the guard chain is emptied by hand, and
// dropped again once the agent has repaired its chain.
func TestNodeKernelLeakGuard(t *testing.T) {
	pod, nodeNS, ext := leakGuardTopology(t, "oe-lg")
	k := newKernelAgent(t, nodeNS)
	want := nodeplan.NodeState{SNAT: []nodeplan.SNATElement{elem("10.128.1.5", "172.18.0.100", "ns/svc")}, NoSNAT: noSNATSubnets}
	k.apply(t, want, ApplyOptions{})
	nodeNS.Sysctl(t, "net/netfilter/nf_conntrack_tcp_loose", "0")

	pod4, ext4 := netip.MustParseAddr("10.128.1.5"), netip.MustParseAddr("172.18.0.1")
	leakedAs := func(dport uint16, flags byte) bool { return leavesAs(t, pod, ext, pod4, ext4, dport, flags) }
	leaked := func(dport uint16) bool { return leakedAs(dport, 0x10) } // a lone ACK
	drops := func() GuardDrops { return k.guardDrops(t) }
	if n := drops(); n != (GuardDrops{}) {
		t.Fatalf("leak guard counters %+v before any packet", n)
	}
	if leaked(7001) {
		t.Fatalf("an invalid packet left the node with the pod address despite the leak guard")
	}
	// A lone ACK is conntrack-invalid: counted as such, not as unsnatted.
	if n := drops(); n != (GuardDrops{Invalid: 1}) {
		t.Errorf("leak guard counters %+v after one dropped invalid packet, want Invalid 1", n)
	}
	// Without the guard the same packet leaks: the test would notice.
	nodeNS.MustRun(t, "nft", "flush", "chain", "inet", TableName, guardChain)
	if !leaked(7002) {
		t.Fatalf("without the leak guard the invalid packet did not leak: the test proves nothing")
	}
	res := k.apply(t, want, ApplyOptions{})
	if !res.Chains {
		t.Errorf("the agent did not notice its emptied chain")
	}
	if leaked(7003) {
		t.Errorf("the repaired leak guard lets the invalid packet out")
	}
	// The rewritten chain counts on: the counter is an object of its own.
	if n := drops(); n != (GuardDrops{Invalid: 2}) {
		t.Errorf("leak guard counters %+v after the chain's repair and a second drop, want Invalid 2", n)
	}
	if table := nodeNS.MustRun(t, "nft", "list", "table", "inet", TableName); !strings.Contains(table, "ip saddr @snat-v4 counter name \"leak-guard-unsnatted\" drop") {
		t.Errorf("guard rule missing after repair:\n%s", table)
	}
	// A new connection's SYN is tracked; with the SNAT chain emptied by
	// hand it would leave unrewritten: the guard drops it, counted apart.
	nodeNS.MustRun(t, "nft", "flush", "chain", "inet", TableName, snatChain)
	if leakedAs(7004, 0x02) {
		t.Errorf("a SYN of a served endpoint without its SNAT left the node")
	}
	if n := drops(); n != (GuardDrops{Invalid: 2, Unsnatted: 1}) {
		t.Errorf("leak guard counters %+v after an unSNATed SYN, want Invalid 2, Unsnatted 1", n)
	}

	// The service leaves the node: its SNAT goes (after the agent's grace).
	// A reroute the master could not take out yet (an NB outage longer than
	// the grace: found by the chaos soak) still brings the pod's packets
	// here; they no longer match a served endpoint, and would leave with
	// the pod address but for the withdrawn set.
	k.apply(t, want, ApplyOptions{}) // the SNAT chain back
	k.apply(t, nodeplan.NodeState{NoSNAT: noSNATSubnets}, ApplyOptions{})
	if leakedAs(7005, 0x02) {
		t.Errorf("a SYN of a withdrawn endpoint left the node with the pod address")
	}
	if n := drops(); n != (GuardDrops{Invalid: 2, Unsnatted: 1, Withdrawn: 1}) {
		t.Errorf("leak guard counters %+v after a withdrawn endpoint's SYN, want Invalid 2, Unsnatted 1, Withdrawn 1", n)
	}
	// Served again (here or, SNATed, anywhere): the set does not get in the way.
	k.apply(t, want, ApplyOptions{})
	if !arrivesAs(t, pod, ext, pod4, ext4, netip.MustParseAddr("172.18.0.100"), 7006, 0x02) {
		t.Errorf("a served-again endpoint's SYN did not leave with the LB IP")
	}
}

// leakGuardTopology is a pod (10.128.1.5) behind a node's management port
// and the outside (172.18.0.1) on the node's eth0, which also holds the
// LB IP 172.18.0.100.
func leakGuardTopology(t *testing.T, prefix string) (pod, nodeNS, ext *testenv.NetNS) {
	t.Helper()
	pod = testenv.NewNetNS(t, prefix+"-pod")
	nodeNS = testenv.NewNetNS(t, prefix+"-node")
	ext = testenv.NewNetNS(t, prefix+"-ext")
	testenv.Veth(t, pod, "eth0", nodeNS, "ovn-k8s-mp0")
	testenv.Veth(t, nodeNS, "eth0", ext, "eth0")
	pod.Addr(t, "eth0", "10.128.1.5/24")
	pod.MustRun(t, "ip", "route", "add", "default", "via", "10.128.1.1")
	nodeNS.Addr(t, "ovn-k8s-mp0", "10.128.1.1/24")
	nodeNS.Addr(t, "eth0", "172.18.0.12/16")
	nodeNS.Addr(t, "eth0", "172.18.0.100/32")
	ext.Addr(t, "eth0", "172.18.0.1/16")
	return pod, nodeNS, ext
}

// TestWithdrawnAgainIsGuardedAFullHold is the regression test of the leak
// the 20-minute chaos run found (docs/reliability.md, seed
// 1796194329050564702): pods' SYNs left their former host with the pod
// address while a stale reroute still brought them there. Each endpoint
// had been withdrawn from that host before, less than a hold earlier; the
// second withdrawal's add of an element already in the withdrawn set kept
// the first one's expiry, so the guard let the packets out a hold after the
// FIRST withdrawal. Here with a 5 s hold: withdrawn, served again,
// withdrawn again 2 s later; past the first withdrawal's hold the
// endpoint's unSNATed SYN is still dropped, and only past the second's it
// leaves (the guard's documented limit, which also shows the probe can see
// a leak).
func TestWithdrawnAgainIsGuardedAFullHold(t *testing.T) {
	pod, nodeNS, ext := leakGuardTopology(t, "oe-lgw")
	cfg := DefaultApplierConfig()
	cfg.WithdrawnHold = 5 * time.Second
	k := newKernelAgentWith(t, nodeNS, cfg)
	served := nodeplan.NodeState{SNAT: []nodeplan.SNATElement{elem("10.128.1.5", "172.18.0.100", "ns/svc")}, NoSNAT: noSNATSubnets}
	gone := nodeplan.NodeState{NoSNAT: noSNATSubnets}
	pod4, ext4 := netip.MustParseAddr("10.128.1.5"), netip.MustParseAddr("172.18.0.1")
	leaked := func(dport uint16) bool { return leavesAs(t, pod, ext, pod4, ext4, dport, 0x02) } // a SYN

	k.apply(t, served, ApplyOptions{})
	k.apply(t, gone, ApplyOptions{})
	first := time.Now()
	time.Sleep(2 * time.Second)
	k.apply(t, served, ApplyOptions{})
	k.apply(t, gone, ApplyOptions{})
	second := time.Now()
	t.Logf("withdrawn set after the second withdrawal:\n%s", nodeNS.MustRun(t, "nft", "list", "set", "inet", TableName, withdrawnSet("v4")))

	time.Sleep(time.Until(first.Add(cfg.WithdrawnHold + 400*time.Millisecond)))
	if leaked(7101) {
		t.Fatalf("past the first withdrawal's hold (%v ago) but within the second's (%v ago), the endpoint's SYN left with the pod address",
			time.Since(first).Round(time.Millisecond), time.Since(second).Round(time.Millisecond))
	}
	if n := k.guardDrops(t); n.Withdrawn != 1 {
		t.Errorf("leak guard counters %+v, want 1 withdrawn drop", n)
	}
	time.Sleep(time.Until(second.Add(cfg.WithdrawnHold + 400*time.Millisecond)))
	if !leaked(7102) {
		t.Errorf("past the second withdrawal's hold the SYN did not leave: the probe cannot see a leak, the test proves nothing")
	}
}

// leavesAs sends one TCP segment with flags from pod (src → dst:dport) and
// reports whether ext sees it arrive with the pod's source src.
func leavesAs(t *testing.T, pod, ext *testenv.NetNS, src, dst netip.Addr, dport uint16, flags byte) bool {
	t.Helper()
	return arrivesAs(t, pod, ext, src, dst, src, dport, flags)
}

// arrivesAs sends one TCP segment with flags from pod (src → dst:dport) and
// reports whether ext sees it arrive with source seenAs.
func arrivesAs(t *testing.T, pod, ext *testenv.NetNS, src, dst, seenAs netip.Addr, dport uint16, flags byte) bool {
	t.Helper()
	// The sniffer's socket is open before the segment is sent: a segment
	// sent earlier would be missed, and a missed leak reads as no leak.
	fd := rawTCPSocket(t, ext)
	defer unix.Close(fd)
	seen := make(chan bool, 1)
	go func() { seen <- sniffTCPFrom(t, fd, seenAs, dport, 700*time.Millisecond) }()
	sendTCP(t, pod, src, dst, dport, flags)
	return <-seen
}

// rawTCPSocket opens a raw socket in ns that sees every incoming TCP
// segment.
func rawTCPSocket(t *testing.T, ns *testenv.NetNS) int {
	t.Helper()
	var fd int
	err := ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
		return err
	})
	if err != nil {
		t.Fatalf("raw socket: %v", err)
	}
	return fd
}

// guardDrops reads the leak guard's counters in the agent's namespace.
func (k *kernelAgent) guardDrops(t *testing.T) GuardDrops {
	t.Helper()
	var n GuardDrops
	if err := k.ns.Do(func() (err error) { n, err = k.a.GuardDrops(context.Background()); return err }); err != nil {
		t.Fatalf("read the leak guard's counters: %v", err)
	}
	return n
}

// sendTCP sends one TCP segment with flags from ns through a raw socket.
func sendTCP(t *testing.T, ns *testenv.NetNS, src, dst netip.Addr, dport uint16, flags byte) {
	t.Helper()
	seg := make([]byte, 20)
	binary.BigEndian.PutUint16(seg[0:], 40000)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint32(seg[4:], 12345)
	binary.BigEndian.PutUint32(seg[8:], 67890)
	seg[12] = 5 << 4 // data offset
	seg[13] = flags
	binary.BigEndian.PutUint16(seg[14:], 64240)
	binary.BigEndian.PutUint16(seg[16:], tcpChecksum(src, dst, seg))
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, seg, 0, &unix.SockaddrInet4{Addr: dst.As4()})
	})
	if err != nil {
		t.Fatalf("send raw TCP segment: %v", err)
	}
}

func tcpChecksum(src, dst netip.Addr, seg []byte) uint16 {
	s, d := src.As4(), dst.As4()
	pseudo := append(append(append([]byte{}, s[:]...), d[:]...), 0, unix.IPPROTO_TCP, 0, byte(len(seg)))
	var sum uint32
	for _, b := range [][]byte{pseudo, seg} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// sniffTCPFrom reports whether a TCP segment from src to dport arrives on
// the raw socket fd (rawTCPSocket) within timeout.
func sniffTCPFrom(t *testing.T, fd int, src netip.Addr, dport uint16, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		tv := unix.NsecToTimeval(time.Until(deadline).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Errorf("raw socket timeout: %v", err)
			return false
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false // EAGAIN: the timeout passed
		}
		ihl := int(buf[0]&0x0f) * 4
		if n < ihl+4 {
			continue
		}
		from, _ := netip.AddrFromSlice(buf[12:16])
		if from == src && binary.BigEndian.Uint16(buf[ihl+2:]) == dport {
			return true
		}
	}
	return false
}
