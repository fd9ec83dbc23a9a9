package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// TestFailoverAsAUserLivesIt: the host dies — its host network drops
// every packet, its agent and its MetalLB speaker are killed — and the
// test measures, from the death, when the first new connection of a pod
// leaves with the LB IP and its reply comes back (through the new host:
// the old one answers nothing), split into its parts as seen from outside
// the product: the master's detection (status.host moves), the label move
// MetalLB follows, the NB rows, the new host's SNAT, and MetalLB's
// announcement from the new host (its gratuitous ARP on the wire). The dead
// host comes back between rounds and the next round kills the other one.
// OVN_EGRESS_FAILOVER_ROUNDS sets the number of rounds (default 3);
// docs/performance.md reports a 20-round run. Times are reported, not
// asserted (a round must recover within 30 s).
//
// Two probe settings: the defaults (--health-interval=200ms
// --health-timeout=500ms) and ovn-kubernetes' 1 s each (this project's
// defaults before).
func TestFailoverAsAUserLivesIt(t *testing.T) {
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("OVN_EGRESS_FAILOVER_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	t.Run("default-probes", func(t *testing.T) { testFailoverAsAUserLivesIt(t, rounds, nil) })
	t.Run("1s-probes", func(t *testing.T) {
		testFailoverAsAUserLivesIt(t, rounds, []string{"--health-interval=1s", "--health-timeout=1s"})
	})
}

func testFailoverAsAUserLivesIt(t *testing.T, rounds int, masterArgs []string) {
	c := newCluster(t, options{backend: "host", masterArgs: masterArgs})
	p1 := c.addPod("p1", "node1", 5)
	lb, host := c.hostedByNode2or3(p1)

	var all []failoverRound
	for i := range rounds {
		r := c.failOnce(p1, lb[0], host)
		t.Logf("round %d: %s", i+1, r)
		all = append(all, r)
		c.revive(r.from)
		host = r.to
	}
	t.Logf("%d rounds, min / median / max:\n%s", rounds, summarize(all))
}

// failoverRound holds the times of one failover, from the host's death.
type failoverRound struct {
	from, to                           string
	status, label, nb, snat, announced time.Duration
	udp, tcp                           *time.Duration // filled when the flows are done
	oldUDP                             *time.Duration // the flow open before the death answered again
	oldTCP                             *tcpFate       // the connection open before the death
	attempts                           int            // UDP flows sent
}

// tcpFate is what became of a TCP connection established through the host
// before it died and kept sending a line every 50 ms: answered again (after
// resumed, from the death), ended (err), or neither within oldTCPBound.
type tcpFate struct {
	resumed time.Duration
	err     error
}

// oldTCPBound is how long after the death an old connection is watched.
const oldTCPBound = 6 * time.Second

func (f *tcpFate) String() string {
	switch {
	case f.resumed > 0:
		return "answered again after " + ms(f.resumed)
	case f.err != nil:
		return "ended: " + f.err.Error()
	}
	return "not answered within " + oldTCPBound.String()
}

func (r failoverRound) String() string {
	return fmt.Sprintf("%s → %s: status.host %s, label %s, NB %s, SNAT %s, announced %s, first UDP flow answered (sent) %s, first TCP connection answered %s (%d UDP flows), the old UDP flow answered again %s, the old TCP connection %s",
		r.from, r.to, ms(r.status), ms(r.label), ms(r.nb), ms(r.snat), ms(r.announced), ms(*r.udp), ms(*r.tcp), r.attempts, ms(*r.oldUDP), r.oldTCP)
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// kill makes node dead to the network: everything in and out of its host
// namespace dropped (the health probes, rerouted pod traffic, replies to
// the LB IP), its agent and speaker killed. Its OVS and pods stay.
func (c *cluster) kill(node string) {
	c.t.Helper()
	conf := "table inet oe-dead {\n" +
		" chain in { type filter hook prerouting priority -400; policy drop; }\n" +
		" chain out { type filter hook output priority -400; policy drop; }\n}\n"
	if out, err := c.dp.Hosts[node].Run("sh", "-c", "printf '"+conf+"' | nft -f -"); err != nil {
		c.t.Fatalf("kill %s: %v %s", node, err, out)
	}
	c.agents[node].Kill()
	c.metallb.KillSpeaker(node)
}

// revive brings a killed node back: network, agent, speaker.
func (c *cluster) revive(node string) {
	c.t.Helper()
	if out, err := c.dp.Hosts[node].Run("nft", "delete", "table", "inet", "oe-dead"); err != nil {
		c.t.Fatalf("revive %s: %v %s", node, err, out)
	}
	c.agents[node] = c.startAgent(node)
	c.metallb.StartSpeaker(node)
	c.metallb.WaitSpeakerSynced(node)
	// Back to a steady state before the next round: the agent has
	// withdrawn the SNAT it had when it died as host.
	c.eventually(node+"'s agent to withdraw its old SNAT", 15*time.Second, func() bool {
		out, err := c.dp.Hosts[node].Run("nft", "list", "map", "inet", "ovn-egress", "snat-v4")
		return err == nil && !strings.Contains(out, "elements")
	})
}

// failOnce kills host and times the failover.
func (c *cluster) failOnce(p *pod, lb netip.Addr, host string) failoverRound {
	c.t.Helper()
	other := otherOf(host)
	r := failoverRound{from: host, to: other}
	label := hosts.NodeLabel(c.ns, "web")
	mac := c.announcerMAC(other)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	// An old flow: one UDP socket (one 5-tuple) of the pod, answered
	// through the host before it dies, that keeps sending every 20 ms.
	var died atomic.Int64 // the death, in Unix nanoseconds
	r.oldUDP = c.oldUDPFlow(ctx, &wg, p, lb, &died)
	r.oldTCP = c.oldTCPConn(ctx, &wg, p, lb, &died)
	// watch polls cond every 10 ms from the death until it holds.
	watch := func(into *time.Duration, start time.Time, cond func() bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if cond() {
					*into = time.Since(start)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	start := time.Now()
	died.Store(start.UnixNano())
	c.kill(host)
	watch(&r.status, start, func() bool {
		es, err := kube.Egress.K8sV1().EgressServices(c.ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && es.Status.Host == other
	})
	watch(&r.label, start, func() bool {
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
		if err != nil {
			return false
		}
		_, ok := n.Labels[label]
		return ok
	})
	watch(&r.nb, start, func() bool {
		out, err := c.ovn.NBCtl("--bare", "--columns=addresses", "find", "Address_Set",
			"external_ids:k8s.ovn.org/owner-type=EgressServiceHost", "external_ids:k8s.ovn.org/name="+other)
		return err == nil && slices.Contains(strings.Fields(strings.ReplaceAll(out, ",", " ")), p.ips[0].String())
	})
	watch(&r.snat, start, func() bool {
		out, err := c.dp.Hosts[other].Run("nft", "list", "map", "inet", "ovn-egress", "snat-v4")
		return err == nil && strings.Contains(out, p.ips[0].String()+" comment")
	})
	watch(&r.announced, start, func() bool {
		return slices.ContainsFunc(c.capture.Announcements(lb, start), func(a testenv.Announcement) bool { return a.MAC == mac })
	})
	// New pod flows to the outside: a UDP datagram every 20 ms (each its
	// own flow, own conntrack entry, one packet, no retransmission) — the
	// first one answered counts from when it was sent; and a TCP
	// connection every 50 ms — the first established counts from when it
	// was (a SYN sent into the dead path is retransmitted after 1 s).
	var mu sync.Mutex
	r.udp = c.firstAnswered(ctx, &wg, &mu, p, lb, start, "udp", 20*time.Millisecond, &r.attempts)
	r.tcp = c.firstAnswered(ctx, &wg, &mu, p, lb, start, "tcp", 50*time.Millisecond, nil)
	wg.Wait()
	if r.status == 0 || r.nb == 0 || r.snat == 0 || r.announced == 0 || *r.udp == 0 || *r.tcp == 0 || *r.oldUDP == 0 {
		c.dumpLogs()
		c.t.Fatalf("no failover %s → %s within 30 s: %s", host, other, r)
	}
	return r
}

// oldUDPFlow opens one UDP flow from p to the outside, waits until it is
// answered with lb as source (through the host, before its death), then
// keeps sending a datagram every 20 ms on it and returns where it will
// store the time from the death (died, 0 before it) of the first answer
// with lb after it. Answers within 50 ms of the death are replies the dead
// host had sent already (the round trip is a few ms) and do not count.
func (c *cluster) oldUDPFlow(ctx context.Context, wg *sync.WaitGroup, p *pod, lb netip.Addr, died *atomic.Int64) *time.Duration {
	c.t.Helper()
	var conn *net.UDPConn
	ext := net.UDPAddrFromAddrPort(netip.AddrPortFrom(c.dp.ExtIPs()[0], echoPort))
	if err := p.ns.Do(func() (err error) { conn, err = net.DialUDP("udp", nil, ext); return err }); err != nil {
		c.t.Fatalf("old UDP flow: %v", err)
	}
	answered := func(wait time.Duration) (netip.Addr, bool) {
		buf := make([]byte, 128)
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		n, err := conn.Read(buf)
		if err != nil {
			return netip.Addr{}, false
		}
		src, err := testenv.ParseSeen(string(buf[:n]))
		return src, err == nil
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, _ = conn.Write([]byte("x"))
		if src, ok := answered(100 * time.Millisecond); ok && src == lb {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the old UDP flow was not answered with %s before the death", lb)
		}
	}
	first := new(time.Duration)
	done := make(chan struct{})
	// A UDP write error (an ICMP answer to an earlier datagram) ends nothing.
	keepSending(ctx, wg, done, 20*time.Millisecond, func() error { _, _ = conn.Write([]byte("x")); return nil })
	wg.Add(1)
	go func() { // receiver
		defer wg.Done()
		defer conn.Close()
		defer close(done)
		for ctx.Err() == nil {
			src, ok := answered(50 * time.Millisecond)
			if at := died.Load(); ok && src == lb && at != 0 {
				if d := time.Since(time.Unix(0, at)); d > 50*time.Millisecond {
					*first = d
					return
				}
			}
		}
	}()
	return first
}

// keepSending calls send every interval until it fails, ctx ends or done
// is closed (an old flow's sender, beside its receiver).
func keepSending(ctx context.Context, wg *sync.WaitGroup, done <-chan struct{}, interval time.Duration, send func() error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for send() == nil {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-time.After(interval):
			}
		}
	}()
}

// oldTCPConn establishes a TCP connection from p to the outside, answered
// with lb as source (through the host, before its death), then sends a line
// on it every 50 ms and returns where its fate will be stored: the first
// answer after the death (not within 300 ms of it: those were in flight
// already), the error that ended it, or neither within oldTCPBound.
func (c *cluster) oldTCPConn(ctx context.Context, wg *sync.WaitGroup, p *pod, lb netip.Addr, died *atomic.Int64) *tcpFate {
	c.t.Helper()
	ext := netip.AddrPortFrom(c.dp.ExtIPs()[0], echoPort)
	var conn net.Conn
	var r *bufio.Reader
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := p.ns.Do(func() (err error) { conn, err = net.DialTimeout("tcp", ext.String(), time.Second); return err })
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			r = bufio.NewReader(conn)
			line, rerr := r.ReadString('\n')
			if src, perr := testenv.ParseSeen(line); rerr == nil && perr == nil && src == lb {
				break
			}
			conn.Close()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no TCP connection answered with %s before the death", lb)
		}
	}
	fate := &tcpFate{}
	done := make(chan struct{})
	keepSending(ctx, wg, done, 50*time.Millisecond, func() error { _, err := conn.Write([]byte("x\n")); return err })
	wg.Add(1)
	go func() { // receiver
		defer wg.Done()
		defer conn.Close()
		defer close(done)
		for ctx.Err() == nil {
			at := died.Load()
			if at != 0 && time.Since(time.Unix(0, at)) > oldTCPBound {
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			line, err := r.ReadString('\n')
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				continue
			case err != nil:
				fate.err = err
				return
			}
			src, err := testenv.ParseSeen(line)
			if err != nil || src != lb || at == 0 {
				continue
			}
			// The kill drops the dead host's traffic at once, but a reply
			// it forwarded just before may be read a little later; no
			// failover completes within 300 ms (the probe timeout alone
			// is 500 ms).
			if d := time.Since(time.Unix(0, at)); d > 300*time.Millisecond {
				fate.resumed = d
				return
			}
		}
	}()
	return fate
}

// firstAnswered starts a new proto flow from p every interval until one is
// answered with lb as source, and returns where it will store the time
// (from start) that counts: the sending of the answered UDP datagram, the
// establishment of the TCP connection (the earliest over all flows).
func (c *cluster) firstAnswered(ctx context.Context, wg *sync.WaitGroup, mu *sync.Mutex, p *pod, lb netip.Addr, start time.Time,
	proto string, interval time.Duration, attempts *int) *time.Duration {
	first := new(time.Duration)
	ext := netip.AddrPortFrom(c.dp.ExtIPs()[0], echoPort)
	wg.Add(1)
	go func() {
		defer wg.Done()
		var flows sync.WaitGroup
		defer flows.Wait()
		for ctx.Err() == nil {
			mu.Lock()
			done := *first > 0
			if attempts != nil && !done {
				*attempts++
			}
			mu.Unlock()
			if done {
				return
			}
			at := time.Now()
			flows.Add(1)
			go func() {
				defer flows.Done()
				src, err := testenv.Ask(p.ns, proto, ext, 3*time.Second)
				if err != nil || src != lb {
					return
				}
				d := at.Sub(start)
				if proto == "tcp" {
					d = time.Since(start) // established and answered
				}
				mu.Lock()
				if *first == 0 || d < *first {
					*first = d
				}
				mu.Unlock()
			}()
			time.Sleep(interval)
		}
	}()
	return first
}

// summarize prints min / median / max per part over rounds.
func summarize(rs []failoverRound) string {
	parts := []struct {
		name string
		get  func(failoverRound) time.Duration
	}{
		{"death → status.host moved (detection)", func(r failoverRound) time.Duration { return r.status }},
		{"death → label on the new host", func(r failoverRound) time.Duration { return r.label }},
		{"death → NB: the pod in the new host's set", func(r failoverRound) time.Duration { return r.nb }},
		{"death → SNAT on the new host", func(r failoverRound) time.Duration { return r.snat }},
		{"death → MetalLB announces from the new host", func(r failoverRound) time.Duration { return r.announced }},
		{"label → announcement (MetalLB's own reaction)", func(r failoverRound) time.Duration { return r.announced - r.label }},
		{"status.host → NB", func(r failoverRound) time.Duration { return r.nb - r.status }},
		{"status.host → SNAT", func(r failoverRound) time.Duration { return r.snat - r.status }},
		{"death → first new UDP flow answered (its send)", func(r failoverRound) time.Duration { return *r.udp }},
		{"death → first new TCP connection answered", func(r failoverRound) time.Duration { return *r.tcp }},
		{"announcement → first UDP flow answered", func(r failoverRound) time.Duration { return *r.udp - r.announced }},
		{"death → the old UDP flow answered again", func(r failoverRound) time.Duration { return *r.oldUDP }},
	}
	var b strings.Builder
	for _, p := range parts {
		var ds []time.Duration
		for _, r := range rs {
			ds = append(ds, p.get(r))
		}
		slices.Sort(ds)
		fmt.Fprintf(&b, "  %-48s %8s %8s %8s\n", p.name, ms(ds[0]), ms(ds[len(ds)/2]), ms(ds[len(ds)-1]))
	}
	var resumed []time.Duration
	var other []string
	for _, r := range rs {
		if r.oldTCP.resumed > 0 {
			resumed = append(resumed, r.oldTCP.resumed)
		} else {
			other = append(other, r.oldTCP.String())
		}
	}
	slices.Sort(resumed)
	if len(resumed) > 0 {
		fmt.Fprintf(&b, "  %-48s %8s %8s %8s (%d of %d rounds)\n", "death → the old TCP connection answered again",
			ms(resumed[0]), ms(resumed[len(resumed)/2]), ms(resumed[len(resumed)-1]), len(resumed), len(rs))
	}
	if len(other) > 0 {
		fmt.Fprintf(&b, "  the old TCP connection otherwise: %s\n", strings.Join(other, "; "))
	}
	return b.String()
}
