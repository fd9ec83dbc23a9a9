package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// HealthListener accepts TCP connections on the node's management IPs at
// one port and closes them at once: the master's connect-mode probe counts
// only an accepted connection, so a dead agent drains its host.
//
// Sockets bind with IP_FREEBIND: the management port's address may appear
// after the agent starts (ovn-kubernetes creates ovn-k8s-mp0), and a freely
// bound listener starts accepting the moment it does.
type HealthListener struct {
	port int
	ns   *Namespace
	log  *logrus.Entry

	mu        sync.Mutex
	listeners map[netip.Addr]net.Listener
}

// NewHealthListener listens in ns at port.
func NewHealthListener(ns *Namespace, port int, log *logrus.Entry) *HealthListener {
	return &HealthListener{port: port, ns: ns, log: log, listeners: map[netip.Addr]net.Listener{}}
}

// Ensure listens on exactly ips: new ones are opened, others closed.
func (h *HealthListener) Ensure(ips []netip.Addr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := map[netip.Addr]bool{}
	var errs []error
	for _, ip := range ips {
		want[ip] = true
		if _, ok := h.listeners[ip]; ok {
			continue
		}
		l, err := h.listen(ip)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		h.listeners[ip] = l
		h.log.WithField("address", l.Addr().String()).Info("health listener accepting")
		go serveHealth(l)
	}
	for ip, l := range h.listeners {
		if !want[ip] {
			l.Close()
			delete(h.listeners, ip)
		}
	}
	return errors.Join(errs...)
}

// Addrs lists the addresses listened on.
func (h *HealthListener) Addrs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.listeners {
		out = append(out, l.Addr().String())
	}
	return out
}

// Close stops every listener.
func (h *HealthListener) Close() { _ = h.Ensure(nil) }

func (h *HealthListener) listen(ip netip.Addr) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if ip.Is4() {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			}
		})
		return errors.Join(err, serr)
	}}
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(h.port))
	var l net.Listener
	err := h.ns.Do(func() (err error) {
		l, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("health listener on %s: %w", addr, err)
	}
	return l, nil
}

func serveHealth(l net.Listener) {
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors and the like: back off, keep serving.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c.Close()
	}
}
