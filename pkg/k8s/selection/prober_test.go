package selection_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// nsDialer dials from inside a network namespace (the socket is created
// there and stays there).
func nsDialer(ns *testenv.NetNS) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var conn net.Conn
		err := ns.Do(func() error {
			var d net.Dialer
			var err error
			conn, err = d.DialContext(ctx, network, address)
			return err
		})
		return conn, err
	}
}

// listenIn accepts (and closes) connections at addr inside ns until the
// test ends or the returned close is called.
func listenIn(t *testing.T, ns *testenv.NetNS, addr string) func() {
	t.Helper()
	var l net.Listener
	err := ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return func() { l.Close() }
}

// probeNS is a namespace with one address per outcome:
//
//	10.244.1.2  a listener on the port
//	10.244.2.2  a local address, nothing listening (reset)
//	10.244.3.0/24  an "unreachable" route (EHOSTUNREACH)
//	10.244.4.0/24  a "blackhole" route (EINVAL)
//	10.244.5.2  a local address whose packets nftables drops (timeout)
//	10.250.0.2  no route at all (ENETUNREACH)
func probeNS(t *testing.T, port int) *testenv.NetNS {
	ns := testenv.NewNetNS(t, "oe-probe")
	ns.Addr(t, "lo", "10.244.1.2/32")
	ns.Addr(t, "lo", "10.244.2.2/32")
	ns.Addr(t, "lo", "10.244.5.2/32")
	ns.MustRun(t, "ip", "route", "add", "unreachable", "10.244.3.0/24")
	ns.MustRun(t, "ip", "route", "add", "blackhole", "10.244.4.0/24")
	ns.MustRun(t, "nft", "add", "table", "inet", "probe")
	ns.MustRun(t, "nft", "add", "chain", "inet", "probe", "in", "{ type filter hook input priority 0 ; }")
	ns.MustRun(t, "nft", "add", "rule", "inet", "probe", "in", "ip", "daddr", "10.244.5.2", "drop")
	listenIn(t, ns, fmt.Sprintf("10.244.1.2:%d", port))
	return ns
}

// TestTCPProberInNetNS probes real sockets in a network namespace: a
// listener is reachable in both modes; a reset is reachable in mode any
// only; an unreachable, blackhole or missing route, and silently dropped
// packets, are unreachable in both; a node is reachable when one of its
// addresses is.
func TestTCPProberInNetNS(t *testing.T) {
	const port = 9
	ns := probeNS(t, port)
	const timeout = 500 * time.Millisecond
	a := netip.MustParseAddr
	tests := []struct {
		name      string
		addrs     []netip.Addr
		any, conn bool  // reachable in mode any / connect
		cause     error // the error of an unreachable verdict
	}{
		{"listener", []netip.Addr{a("10.244.1.2")}, true, true, nil},
		{"refused", []netip.Addr{a("10.244.2.2")}, true, false, syscall.ECONNREFUSED},
		{"unreachable route", []netip.Addr{a("10.244.3.2")}, false, false, syscall.EHOSTUNREACH},
		{"blackhole route", []netip.Addr{a("10.244.4.2")}, false, false, syscall.EINVAL},
		{"dropped", []netip.Addr{a("10.244.5.2")}, false, false, nil},
		{"no route", []netip.Addr{a("10.250.0.2")}, false, false, syscall.ENETUNREACH},
		{"one of two addresses answers", []netip.Addr{a("10.244.5.2"), a("10.244.1.2")}, true, true, nil},
	}
	for _, tc := range tests {
		for _, mode := range []string{selection.ModeAny, selection.ModeConnect} {
			want := tc.any
			if mode == selection.ModeConnect {
				want = tc.conn
			}
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				p := &selection.TCPProber{Port: port, Mode: mode, Dial: nsDialer(ns)}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				start := time.Now()
				err := p.Probe(ctx, "node", tc.addrs)
				took := time.Since(start)
				if got := err == nil; got != want {
					t.Fatalf("reachable = %v (%v); want %v", got, err, want)
				}
				if err != nil && tc.cause != nil && !errors.Is(err, tc.cause) {
					t.Errorf("unreachable because of %v; want %v", err, tc.cause)
				}
				if errors.Is(err, selection.ErrLocal) {
					t.Fatalf("a remote failure reported as local: %v", err)
				}
				// The timeout cuts the probe short (TCP's own SYN retries
				// would take seconds); the margin is for a loaded machine.
				if took > timeout+time.Second {
					t.Fatalf("probe took %v; timeout %v", took, timeout)
				}
			})
		}
	}
}

// TestTCPProberOutlivesLostSYNs: a probe whose first SYNs are lost (as on
// a loaded datapath) still finds the node reachable within its 500 ms —
// the kernel would retransmit them only after a second — and a probe
// whose every SYN is lost does not.
func TestTCPProberOutlivesLostSYNs(t *testing.T) {
	const port, timeout = 9, 500 * time.Millisecond
	ns := testenv.NewNetNS(t, "oe-probe")
	ns.Addr(t, "lo", "10.244.6.2/32")
	listenIn(t, ns, fmt.Sprintf("10.244.6.2:%d", port))
	ns.MustRun(t, "nft", "add", "table", "inet", "probe")
	ns.MustRun(t, "nft", "add", "chain", "inet", "probe", "in", "{ type filter hook input priority 0 ; }")
	for _, tc := range []struct {
		lost      int // SYNs dropped before the rest pass
		reachable bool
	}{{0, true}, {1, true}, {3, true}, {100, false}} {
		for _, mode := range []string{selection.ModeAny, selection.ModeConnect} {
			t.Run(fmt.Sprintf("%d lost/%s", tc.lost, mode), func(t *testing.T) {
				ns.MustRun(t, "nft", "flush", "chain", "inet", "probe", "in")
				if tc.lost > 0 {
					ns.MustRun(t, "nft", "add", "rule", "inet", "probe", "in", "ip", "daddr", "10.244.6.2", "tcp", "flags", "&", "(syn|ack)", "==", "syn",
						"counter", "quota", "until", strconv.Itoa(tc.lost*60), "bytes", "drop")
				}
				p := &selection.TCPProber{Port: port, Mode: mode, Dial: nsDialer(ns)}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				err := p.Probe(ctx, "node", []netip.Addr{netip.MustParseAddr("10.244.6.2")})
				if got := err == nil; got != tc.reachable {
					t.Fatalf("reachable = %v (%v) with %d SYNs lost; want %v\n%s", got, err, tc.lost, tc.reachable,
						ns.MustRun(t, "nft", "list", "chain", "inet", "probe", "in"))
				}
			})
		}
	}
}

// TestTCPProberLocalErrors: errors of the prober's own machine are
// ErrLocal (the verdict stays), not unreachable.
func TestTCPProberLocalErrors(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.EADDRNOTAVAIL} {
		p := &selection.TCPProber{Port: 9, Mode: selection.ModeAny, Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errno}
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		err := p.Probe(ctx, "node", []netip.Addr{netip.MustParseAddr("10.0.0.2")})
		cancel()
		if !errors.Is(err, selection.ErrLocal) {
			t.Errorf("%v: got %v; want ErrLocal", errno, err)
		}
	}
}

// TestTCPProberStarved: a probe that could not start connecting before its
// deadline (its process not scheduled) is ErrStarved — no verdict on the
// node — not unreachable.
func TestTCPProberStarved(t *testing.T) {
	p := &selection.TCPProber{Port: 9, Mode: selection.ModeAny, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := p.Probe(ctx, "node", []netip.Addr{netip.MustParseAddr("10.0.0.2")})
	if !errors.Is(err, selection.ErrStarved) || strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("got %v; want ErrStarved and no verdict", err)
	}
}

func TestConfigValidate(t *testing.T) {
	subnets := translate.DefaultConfig().ClusterSubnets
	c := selection.Config{ClusterSubnets: subnets}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// Validate changes nothing; WithDefaults fills what has a default.
	if c.HealthCheckPort != 0 || c.HealthCheckMode != "" {
		t.Fatalf("Validate changed the configuration: %+v", c)
	}
	if d := c.WithDefaults(); d.HealthCheckPort != 9 || d.HealthTimeout != 500*time.Millisecond || d.HealthCheckMode != selection.ModeAny || d.HealthInterval != 0 {
		t.Fatalf("defaults: %+v", d)
	} else if err := d.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, bad := range []selection.Config{
		{ClusterSubnets: subnets, HealthCheckPort: 70000},
		{ClusterSubnets: subnets, HealthInterval: -time.Second},
		{ClusterSubnets: subnets, HealthCheckMode: "grpc"},
		{ClusterSubnets: subnets, UnassignedTraffic: "maybe"},
		{},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
