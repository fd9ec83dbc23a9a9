package node

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// brokenNetlink fails every link lookup with a transient error.
type brokenNetlink struct{ *FakeNetlink }

func (brokenNetlink) LinkByName(string) (netlink.Link, error) { return nil, unix.ENOBUFS }

// TestNodeResolverFakeVRF resolves names against the fake netlink (this
// kernel cannot create VRF devices; TestNodeKernelVRFResolutionRealVRFOnlyWhereKernelAllows covers the
// real netlink path): a VRF device wins over an rt_tables entry of the same
// name, a link that is not a VRF falls through to rt_tables, an unknown name
// is ErrNetworkNotFound and a netlink failure is a transient error.
func TestNodeResolverFakeVRF(t *testing.T) {
	rt := filepath.Join(t.TempDir(), "rt_tables")
	if err := os.WriteFile(rt, []byte("200 blue\n201 eth9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nl := NewFakeNetlink()
	nl.AddLink(fakeVRF("blue", 100))
	nl.AddLink(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth9"}})
	r := NewTableResolver(nl, rt)
	for name, want := range map[string]Resolution{"blue": {Table: 100, Source: "vrf"}, "eth9": {Table: 201, Source: rt}} {
		if got, err := r.Resolve(name); err != nil || got != want {
			t.Errorf("Resolve(%s) = %+v, %v; want %+v", name, got, err, want)
		}
	}
	if _, err := r.Resolve("red"); !errors.Is(err, ErrNetworkNotFound) {
		t.Errorf("Resolve(red): %v; want ErrNetworkNotFound", err)
	}
	tables, err := r.ResolveAll([]string{"blue", "red"})
	if err != nil || len(tables) != 1 || tables["blue"] != 100 {
		t.Errorf("ResolveAll = %v, %v; want only blue → 100", tables, err)
	}
	if _, err := NewTableResolver(brokenNetlink{nl}, rt).Resolve("blue"); err == nil || errors.Is(err, ErrNetworkNotFound) || !errors.Is(err, unix.ENOBUFS) {
		t.Errorf("netlink failure: %v; want a transient ENOBUFS error", err)
	}
}

// TestNodeHealthListener: accept-and-close on the addresses given, moved
// when they change, closed at the end.
func TestNodeHealthListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	h := NewHealthListener(HostNamespace(), port, testLog())
	lo := netip.MustParseAddr("127.0.0.1")
	other := netip.MustParseAddr("127.0.0.2")
	dial := func(a netip.Addr) error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(a.String(), strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := h.Ensure([]netip.Addr{lo}); err != nil {
		t.Fatal(err)
	}
	if err := dial(lo); err != nil {
		t.Errorf("dial %s: %v", lo, err)
	}
	if err := h.Ensure([]netip.Addr{other}); err != nil {
		t.Fatal(err)
	}
	if err := dial(lo); err == nil {
		t.Errorf("%s still accepts after the listener moved", lo)
	}
	if err := dial(other); err != nil {
		t.Errorf("dial %s: %v", other, err)
	}
	h.Close()
	if err := dial(other); err == nil || len(h.Addrs()) != 0 {
		t.Errorf("accepting after Close (%v)", h.Addrs())
	}
}
