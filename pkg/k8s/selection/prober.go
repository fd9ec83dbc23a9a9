package selection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
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

// ErrStarved marks a failed probe whose first connect attempt started only
// in the second half of its time, or not at all: this process was not
// scheduled (a CPU-starved master), so the silence says little about the
// node. Health checks set such a failure aside, as a late one, a bounded
// number of times in a row.
var ErrStarved = errors.New("the prober was not scheduled in time to connect")

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
// Within the deadline a new connect attempt starts every attemptEvery
// while the earlier ones are still waiting (the kernel retransmits a lost
// SYN only after a second, longer than the whole probe): a lost SYN or
// SYN-ACK costs one attemptEvery, not the probe. A probe fails only if the
// whole deadline passed without an answer that counts to any attempt.
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
	silent := false // an address that had its chance and did not answer
	for range addrs {
		err := <-results
		if err == nil {
			return nil
		}
		silent = silent || !(errors.Is(err, ErrLocal) || errors.Is(err, ErrStarved))
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if !silent {
		return err // wraps ErrLocal or ErrStarved: no verdict on the node
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

// attemptEvery is the time between two connect attempts of one probe.
const attemptEvery = 100 * time.Millisecond

// probeAddr starts a connect attempt to addr every attemptEvery until one
// gets an answer that counts or ctx's deadline passes; each attempt may
// wait until the deadline.
func (p *TCPProber) probeAddr(ctx context.Context, addr netip.Addr) error {
	target := netip.AddrPortFrom(addr, uint16(p.Port)).String()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Second)
		defer cancel()
	}
	start := time.Now()
	deadline, _ := ctx.Deadline()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the attempts still waiting
	results := make(chan error, 1)
	var began atomic.Int64 // when the first attempt ran, ns since start (0: not yet)
	attempt := func() {
		go func() {
			began.CompareAndSwap(0, int64(max(time.Since(start), 1)))
			conn, err := p.dial(ctx, target)
			if err == nil {
				conn.Close()
			} else if p.Mode != ModeConnect && answered(err) {
				err = nil
			}
			select {
			case results <- err:
			case <-ctx.Done():
			}
		}()
	}
	next := time.NewTicker(attemptEvery)
	defer next.Stop()
	var last error
	attempt()
	for {
		select {
		case err := <-results:
			if err == nil {
				return nil
			}
			if last == nil || !timedOut(err) {
				last = err // an attempt cut at the deadline says less than a refusal
			}
		case <-next.C:
			attempt()
		case <-ctx.Done():
			if b := time.Duration(began.Load()); b == 0 || b > deadline.Sub(start)/2 {
				return fmt.Errorf("%s: %w (first connect %v after the probe's start, deadline %v)", target, ErrStarved,
					b.Round(time.Millisecond), deadline.Sub(start).Round(time.Millisecond))
			}
			return probeError(target, last)
		}
	}
}

// timedOut reports an attempt that ended without an answer.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || (errors.As(err, &ne) && ne.Timeout())
}

// probeError is a failed probe's error: the last attempt's, marked
// ErrLocal when the prober's own machine refused it.
func probeError(target string, last error) error {
	if last == nil {
		last = context.DeadlineExceeded
	}
	if isLocal(last) {
		last = fmt.Errorf("%w: %w", ErrLocal, last)
	}
	return fmt.Errorf("%s: %w", target, last)
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
