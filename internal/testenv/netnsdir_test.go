package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const firstRunEnv = "OE_NETNS_FIRST_RUN"

// TestNetNSFirstRun reproduces a machine on which nothing has made
// /run/netns a mount point yet (issue 36), in a mount namespace of its own
// with a fresh tmpfs on /run: a namespace is created, then iproute2's first
// `ip netns add` binds /run/netns onto itself, then the namespace is
// deleted. Without PrepareNetNSDir the deletion fails with EBUSY, as it did
// on the fresh machine; with it (what NewNetNS does) it succeeds and leaves
// no mount behind.
func TestNetNSFirstRun(t *testing.T) {
	if mode := os.Getenv(firstRunEnv); mode != "" {
		firstRunScenario(mode == "prepared", os.Getenv(firstRunEnv+"_IP"))
		return
	}
	if os.Geteuid() != 0 {
		t.Fatalf("needs root (euid %d)", os.Geteuid())
	}
	bins, err := lookPaths(NetNSPackages, "ip")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode, want string
	}{
		{"unprepared", "device or resource busy"},
		{"prepared", "deleted; mounts left: 0"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNetNSFirstRun$", "-test.count=1")
		cmd.Env = append(os.Environ(), firstRunEnv+"="+c.mode, firstRunEnv+"_IP="+bins["ip"])
		// A mount namespace of the child's own, made private by Go's
		// forkExec, so that nothing it mounts reaches this machine's.
		cmd.SysProcAttr = &unix.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", c.mode, err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%s: the deletion printed %q, want %q", c.mode, out, c.want)
		}
	}
}

func firstRunScenario(prepared bool, ip string) {
	fail := func(err error) {
		fmt.Println("setup:", err)
		os.Exit(0)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "size=1m"); err != nil {
		fail(err)
	}
	if prepared {
		if err := PrepareNetNSDir(); err != nil {
			fail(err)
		}
	}
	name := fmt.Sprintf("oe-first-%d-1", os.Getpid())
	if err := createNamedNS(name); err != nil {
		fail(err)
	}
	if out, err := exec.Command(ip, "netns", "add", "oe-iproute").CombinedOutput(); err != nil {
		fail(fmt.Errorf("ip netns add: %v: %s", err, out))
	}
	_ = netns.DeleteNamed("oe-iproute")
	if err := DeleteNetNS(name); err != nil {
		fmt.Println("delete:", err)
		return
	}
	n, err := mountsAt(netnsRunDir + "/" + name)
	fmt.Printf("deleted; mounts left: %d %v\n", n, err)
}
