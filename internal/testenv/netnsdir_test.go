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

// TestNetNSKilledRunSwept kills a test process that holds a namespace
// (SIGKILL: no cleanup runs), in a mount namespace of its own with a fresh
// tmpfs on /run, and then sets /run/netns up as the next run does: the
// killed process's namespace is unmounted and removed, while one of a live
// process and one whose name is not ours stay.
func TestNetNSKilledRunSwept(t *testing.T) {
	if mode := os.Getenv(sweepEnv); mode != "" {
		sweepScenario(mode)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatalf("needs root (euid %d)", os.Geteuid())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNetNSKilledRunSwept$", "-test.count=1")
	cmd.Env = append(os.Environ(), sweepEnv+"=next-run")
	cmd.SysProcAttr = &unix.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "killed run's namespace: gone, mounts left 0; live: kept; foreign: kept"
	if !strings.Contains(string(out), want) {
		t.Errorf("the next run's setup printed %q, want %q", out, want)
	}
}

const sweepEnv = "OE_NETNS_SWEEP"

func sweepScenario(mode string) {
	if mode == "victim" {
		// The killed run: it holds a namespace until it is killed.
		if err := PrepareNetNSDir(); err != nil {
			fmt.Println("setup:", err)
			os.Exit(1)
		}
		if err := createNamedNS(fmt.Sprintf("oe-victim-%d-1", os.Getpid())); err != nil {
			fmt.Println("setup:", err)
			os.Exit(1)
		}
		fmt.Println("holding")
		select {}
	}
	fail := func(err error) {
		fmt.Println("setup:", err)
		os.Exit(0)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "size=1m"); err != nil {
		fail(err)
	}
	victim := exec.Command(os.Args[0], "-test.run=^TestNetNSKilledRunSwept$", "-test.count=1")
	victim.Env = append(os.Environ(), sweepEnv+"=victim")
	stdout, err := victim.StdoutPipe()
	if err != nil {
		fail(err)
	}
	if err := victim.Start(); err != nil {
		fail(err)
	}
	line := make([]byte, 64)
	if n, _ := stdout.Read(line); !strings.Contains(string(line[:n]), "holding") {
		fail(fmt.Errorf("the victim printed %q", line[:n]))
	}
	killed := fmt.Sprintf("%s/oe-victim-%d-1", netnsRunDir, victim.Process.Pid)
	_ = victim.Process.Signal(unix.SIGKILL)
	_ = victim.Wait()
	if n, err := mountsAt(killed); n == 0 || err != nil {
		fail(fmt.Errorf("the killed run's namespace is not mounted (%d, %v)", n, err))
	}
	live := fmt.Sprintf("oe-live-%d-1", os.Getpid())
	for _, name := range []string{live, "foreign-1-1"} {
		if err := createNamedNS(name); err != nil {
			fail(err)
		}
	}
	// The next run's setup (netnsDirOnce is this process's: call it directly).
	if err := setUpNetNSDir(netnsRunDir, netnsLock); err != nil {
		fail(err)
	}
	state := func(path string) string {
		if _, err := os.Stat(path); err == nil {
			return "kept"
		}
		return "gone"
	}
	n, _ := mountsAt(killed)
	fmt.Printf("killed run's namespace: %s, mounts left %d; live: %s; foreign: %s\n",
		state(killed), n, state(netnsRunDir+"/"+live), state(netnsRunDir+"/foreign-1-1"))
}
