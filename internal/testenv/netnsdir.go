package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// netnsRunDir is where named network namespaces live (iproute2's
// NETNS_RUN_DIR, vishvananda/netns' bindMountPath).
const netnsRunDir = "/run/netns"

// netnsLock serialises the setup of netnsRunDir between the test processes
// of one `go test ./...` (packages run in parallel processes).
const netnsLock = "/run/ovn-egress-netns.lock"

var (
	netnsDirOnce sync.Once
	netnsDirErr  error
)

// PrepareNetNSDir makes netnsRunDir a shared mount point of its own, as
// iproute2's `ip netns add` does, before this process creates its first
// namespace. Without it, a namespace file bind-mounted on the plain
// directory (netns.NewNamed mounts without this step) is copied into the
// recursive self-bind that the machine's first `ip netns add` makes later:
// deleting the namespace then unmounts the copy on top, the original stays
// underneath, unreachable by path, and the file cannot be removed (EBUSY).
// A fresh machine is the only one where nothing made the bind yet, so only
// a first run failed (issue 36). The setup runs once per process under a
// file lock shared by every test process, so that two processes never stack
// two binds. It also removes namespaces an earlier, killed test process left
// behind (names this package makes whose process is gone).
func PrepareNetNSDir() error {
	netnsDirOnce.Do(func() { netnsDirErr = setUpNetNSDir(netnsRunDir, netnsLock) })
	return netnsDirErr
}

func setUpNetNSDir(dir, lock string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lf, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock, err)
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN) //nolint:errcheck // closing releases it too
	if err := makeSharedMountPoint(dir); err != nil {
		return err
	}
	sweepStaleNetNS(dir)
	return nil
}

// makeSharedMountPoint turns dir into a shared mount point: when it is one
// already, only the propagation is set; otherwise it is bound onto itself
// first (iproute2's netns_add does the same two steps).
func makeSharedMountPoint(dir string) error {
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	// EINVAL: not a mount point yet.
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// mountsAt counts the mounts whose mount point is path.
func mountsAt(path string) (int, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == path {
			n++
		}
	}
	return n, s.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ourNetNS matches the names NewNetNS (and the benchmarks) give:
// "<prefix>-<pid>-<n>", every prefix of this repository's starting with "oe".
var ourNetNS = regexp.MustCompile(`^oe[a-z0-9-]*-([0-9]+)-[0-9]+$`)

// sweepStaleNetNS removes the namespaces of test processes that no longer
// run (killed by a timeout, or by hand), so that they pile up on no machine.
// Best effort: a namespace that cannot go stays, and nothing depends on it.
func sweepStaleNetNS(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		m := ourNetNS.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); pid == os.Getpid() || processExists(pid) {
			continue
		}
		_ = deleteNetNSFile(filepath.Join(dir, e.Name()))
	}
}

func processExists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// deleteNetNSFile unmounts a namespace file (every layer mounted on it) and
// removes it.
func deleteNetNSFile(path string) error {
	for i := 0; i < 8; i++ {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			break // EINVAL: nothing (more) mounted there
		}
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
