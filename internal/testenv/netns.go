package testenv

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// NetNSPackages are the Debian packages of the binaries the network
// namespace helpers need.
const NetNSPackages = "iproute2 nftables ethtool"

// NetNS is a named network namespace a test created (/run/netns/NAME). It
// is deleted by name when the test ends; everything inside it (links,
// addresses, rules, nft tables, sockets' addresses) goes with it.
type NetNS struct {
	Name string
	bins map[string]string
}

var netnsSeq atomic.Int64

// NewNetNS creates a namespace named "<prefix>-<pid>-<n>" with lo up, and
// deletes it when t ends. It needs root and ip, nft and ethtool: missing
// binaries or permissions fail the test, they never skip it.
func NewNetNS(t testing.TB, prefix string) *NetNS {
	t.Helper()
	bins, err := lookPaths(NetNSPackages, "ip", "nft", "ethtool")
	if err != nil {
		t.Fatalf("network namespaces: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("network namespaces need root (euid %d)", os.Geteuid())
	}
	if !strings.HasPrefix(prefix, "oe") {
		t.Fatalf("network namespace prefix %q: the tests' namespaces start with \"oe\" (a killed run's are swept by that)", prefix)
	}
	if err := PrepareNetNSDir(); err != nil {
		t.Fatalf("prepare %s: %v", netnsRunDir, err)
	}
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), netnsSeq.Add(1))
	if err := createNamedNS(name); err != nil {
		t.Fatalf("create network namespace %s: %v", name, err)
	}
	ns := &NetNS{Name: name, bins: bins}
	t.Cleanup(func() {
		if err := DeleteNetNS(name); err != nil {
			t.Errorf("delete network namespace %s: %v", name, err)
		}
	})
	ns.MustRun(t, "ip", "link", "set", "lo", "up")
	// A new namespace copies IPv4's settings from the machine's own (the
	// kernel's default devconf_inherit_init_net=0): on a machine that
	// forwards (Docker, kind) every test host would be a router. Start from
	// the kernel's defaults; tests that want forwarding turn it on.
	ns.Sysctl(t, "net/ipv4/ip_forward", "0")
	ns.Sysctl(t, "net/ipv6/conf/all/forwarding", "0")
	return ns
}

// createNamedNS makes the namespace on a locked thread and puts the thread
// back where it was (netns.NewNamed switches the calling thread).
func createNamedNS(name string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return err
	}
	h.Close()
	return netns.Set(orig)
}

// DeleteNetNS removes the named namespace.
func DeleteNetNS(name string) error { return deleteNetNSFile(filepath.Join(netnsRunDir, name)) }

// Do runs f on a locked OS thread inside the namespace (sockets opened in f
// belong to the namespace and stay there after f returns).
func (n *NetNS) Do(f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	h, err := netns.GetFromName(n.Name)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: the runtime retires it with the goroutine.
		return fmt.Errorf("return to the original namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Run runs a command inside the namespace (`ip netns exec NAME ...`) and
// returns its combined output.
func (n *NetNS) Run(args ...string) (string, error) {
	bin := args[0]
	if p, ok := n.bins[bin]; ok {
		bin = p
	}
	cmd := exec.Command(n.bins["ip"], append([]string{"netns", "exec", n.Name, bin}, args[1:]...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), n.Name, err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// MustRun is Run that fails the test on error.
func (n *NetNS) MustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.Run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Sysctl sets a network parameter inside the namespace by its /proc/sys
// path ("net/ipv4/ip_forward", "1"); network parameters belong to the
// namespace of the thread that opens the file.
func (n *NetNS) Sysctl(t testing.TB, path, value string) {
	t.Helper()
	err := n.Do(func() error { return os.WriteFile("/proc/sys/"+path, []byte(value), 0o644) })
	if err != nil {
		t.Fatalf("sysctl %s=%s in %s: %v", path, value, n.Name, err)
	}
}

// Veth connects two namespaces with a veth pair (aName in a, bName in b),
// brings both ends up and turns TX checksum offload off on both: packets a
// veth end originates otherwise carry partial checksums, and conntrack
// treats them as invalid and skips NAT (reference/hostpath.md §1).
func Veth(t testing.TB, a *NetNS, aName string, b *NetNS, bName string) {
	t.Helper()
	// Created in a, the peer moved to b in the same request.
	a.MustRun(t, "ip", "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b.Name)
	for _, end := range []struct {
		ns  *NetNS
		dev string
	}{{a, aName}, {b, bName}} {
		end.ns.MustRun(t, "ip", "link", "set", end.dev, "up")
		end.ns.MustRun(t, "ethtool", "-K", end.dev, "tx", "off")
	}
}

// Addr adds an address (CIDR) to a device; IPv6 addresses skip DAD so they
// are usable at once.
func (n *NetNS) Addr(t testing.TB, dev, cidr string) {
	t.Helper()
	args := []string{"ip", "addr", "add", cidr, "dev", dev}
	if strings.Contains(cidr, ":") {
		args = append(args, "nodad")
	}
	n.MustRun(t, args...)
}

// ForwardLoopback forwards TCP connections to addr (127.0.0.1:PORT or
// [::1]:PORT) inside n to the same address in the test's own namespace, so
// that a process in n reaches a server that listens on this machine's
// loopback only. Traffic in n passes n's own loopback first, where a
// filter can cut it. It stops when t ends.
func (n *NetNS) ForwardLoopback(t testing.TB, addr string) {
	t.Helper()
	var l net.Listener
	if err := n.Do(func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("forward %s into %s: %v", addr, n.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
}
