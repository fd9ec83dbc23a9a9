package selection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Prober tells whether a node is reachable at its management-port
// addresses. Probe must return by ctx's deadline: nil means reachable, an
// error wrapping ErrLocal means the probe could not be made (the verdict
// stays as it was), any other error means unreachable.
type Prober interface {
	Probe(ctx context.Context, node string, addrs []netip.Addr) error
}

// ErrLocal marks a probe that failed on the prober's own machine (out of
// file descriptors, buffers or ports): it says nothing about the node.
var ErrLocal = errors.New("probe failed locally")

// TCPProber probes with TCP connects to Port at each address, in parallel;
// a node is reachable when one of its addresses is.
//
// Mode any: the host answering at all — accepting, or refusing with a
// reset — is reachable; a timeout, host or network unreachable, a
// blackhole or prohibit route, is not. ovn-kubernetes also counts any other
// error as reachable; here only an answer from the host does, and errors of
// the prober's own machine leave the verdict unchanged (ErrLocal).
// Mode connect: only an accepted connection counts.
//
// Within the deadline a failed attempt is retried (the first attempt gets
// 70% of the time, so one lost SYN does not fail the probe; fast failures
// are retried every 100 ms): a probe fails only if the whole deadline
// passed without an answer that counts.
type TCPProber struct {
	Port int
	Mode string
	// Dial opens connections; nil uses a net.Dialer. Tests dial from
	// inside a network namespace with it.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Probe implements Prober.
func (p *TCPProber) Probe(ctx context.Context, node string, addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return fmt.Errorf("node %s: no management address to probe", node)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error, len(addrs))
	for _, a := range addrs {
		go func() { results <- p.probeAddr(ctx, a) }()
	}
	var errs []error
	local := true
	for range addrs {
		err := <-results
		if err == nil {
			return nil
		}
		local = local && errors.Is(err, ErrLocal)
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if local {
		return err
	}
	return fmt.Errorf("node %s unreachable: %w", node, err)
}

func (p *TCPProber) dial(ctx context.Context, address string) (net.Conn, error) {
	if p.Dial != nil {
		return p.Dial(ctx, "tcp", address)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", address)
}

// probeAddr tries addr until an answer counts or ctx's deadline passes.
func (p *TCPProber) probeAddr(ctx context.Context, addr netip.Addr) error {
	target := netip.AddrPortFrom(addr, uint16(p.Port)).String()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second)
	}
	var last error
	for attempt := 0; ; attempt++ {
		remaining := time.Until(deadline)
		if remaining <= 0 || ctx.Err() != nil {
			if last == nil {
				last = context.DeadlineExceeded
			}
			return fmt.Errorf("%s: %w", target, last)
		}
		budget := remaining
		if attempt == 0 {
			budget = remaining * 7 / 10
		}
		actx, cancel := context.WithTimeout(ctx, budget)
		start := time.Now()
		conn, err := p.dial(actx, target)
		cancel()
		if err == nil {
			conn.Close()
			return nil
		}
		if p.Mode != ModeConnect && answered(err) {
			return nil
		}
		last = err
		if isLocal(err) {
			last = fmt.Errorf("%w: %w", ErrLocal, err)
		}
		if wait := 100*time.Millisecond - time.Since(start); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(min(wait, time.Until(deadline))):
			}
		}
	}
}

// answered reports whether a failed connect still heard from the host: a
// reset in answer to the SYN (nothing listens) or right after it.
func answered(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// isLocal reports errors of the prober's own machine.
func isLocal(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
