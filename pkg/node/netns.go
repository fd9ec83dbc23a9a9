package node

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Namespace runs network work in one network namespace: the host's own
// (the DaemonSet case) or a named one (--netns; tests and the local e2e run
// one agent per "node" namespace on one machine).
//
// Netlink goes through a handle bound to the namespace, but nft (knftables
// runs the nft binary), /proc/sys/net and new sockets follow the calling
// thread's namespace, so that work runs inside Do.
type Namespace struct {
	name   string
	handle netns.NsHandle // closed handle for the host namespace
}

// HostNamespace is the calling process's own network namespace.
func HostNamespace() *Namespace { return &Namespace{handle: netns.None()} }

// OpenNamespace opens the named namespace (/run/netns/NAME); "" is the host.
func OpenNamespace(name string) (*Namespace, error) {
	if name == "" {
		return HostNamespace(), nil
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %q: %w", name, err)
	}
	return &Namespace{name: name, handle: h}, nil
}

// Name is the namespace's name, "" for the host.
func (n *Namespace) Name() string { return n.name }

// Handle is the namespace handle for netlink.NewHandleAt; netns.None() for
// the host.
func (n *Namespace) Handle() netns.NsHandle { return n.handle }

// Close releases the namespace handle.
func (n *Namespace) Close() error {
	if n.name == "" {
		return nil
	}
	return n.handle.Close()
}

// Do runs f on a locked OS thread inside the namespace. The thread goes
// back to its original namespace afterwards; if that fails the thread stays
// locked, so the runtime retires it with the goroutine instead of reusing
// a thread in the wrong namespace.
func (n *Namespace) Do(f func() error) error {
	if n.name == "" {
		return f()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %q: %w", n.name, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("leave network namespace %q: %w", n.name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}
