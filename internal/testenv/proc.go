package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// daemon is one child process started by the environment. It runs in the
// foreground (no --detach), so it dies with the test binary (Pdeathsig) and
// its exit is noticed at once instead of as a long readiness timeout.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // set before done is closed
	logPth string
	// logFrom is the log's size when this process started: a restarted
	// process appends to the same file, and what an earlier run printed
	// must not answer for this one.
	logFrom int64
	// signal, when set, delivers signals instead of kill(2) on the process
	// group (a container: runc passes SIGTERM on; a SIGKILL goes through
	// `runc kill`); pid, when set, is the process tests signal themselves.
	signal func(syscall.Signal)
	pid    func() int
	// stopped is set when the test stopped or killed the daemon itself.
	stopped atomic.Bool
}

// startDaemon starts bin with args, logging to dir/name.out.
func startDaemon(dir, name string, env []string, bin string, args ...string) (*daemon, error) {
	return startDaemonThen(nil, dir, name, env, bin, args...)
}

// startDaemonThen is startDaemon with afterExit run once the process has
// exited, before anyone waiting for it is told (a container's runtime state
// is removed then, not while the test's directory is).
func startDaemonThen(afterExit func(), dir, name string, env []string, bin string, args ...string) (*daemon, error) {
	out := filepath.Join(dir, name+".out")
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", out, err)
	}
	var from int64
	if st, err := f.Stat(); err == nil {
		from = st.Size()
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{}), logPth: out, logFrom: from}
	go func() {
		d.err = cmd.Wait()
		f.Close()
		if afterExit != nil {
			afterExit()
		}
		close(d.done)
	}()
	return d, nil
}

// exited reports whether the daemon has exited, with a reason that quotes the
// end of its log.
func (d *daemon) exited() error {
	select {
	case <-d.done:
		return fmt.Errorf("%s exited (%v); last output:\n%s", d.name, d.err, tail(d.logPth, 20))
	default:
		return nil
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs. Safe to call twice.
func (d *daemon) stop(grace time.Duration) {
	d.stopped.Store(true)
	select {
	case <-d.done:
		return
	default:
	}
	d.send(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		d.send(syscall.SIGKILL)
		<-d.done
	}
}

// send delivers sig: through the signal hook, or SIGTERM to the process
// and SIGKILL to its whole group.
func (d *daemon) send(sig syscall.Signal) {
	switch {
	case d.signal != nil:
		d.signal(sig)
	case sig == syscall.SIGKILL:
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	default:
		_ = d.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL to the daemon and waits for it.
func (d *daemon) kill() {
	d.stopped.Store(true)
	select {
	case <-d.done:
		return
	default:
	}
	d.send(syscall.SIGKILL)
	<-d.done
}

// Pid returns the daemon's process id (a container's first process).
func (d *daemon) Pid() int {
	if d.pid != nil {
		return d.pid()
	}
	return d.cmd.Process.Pid
}

// waitFor polls cond every few milliseconds until it returns nil, the timeout
// passes, or one of the watched daemons exits.
func waitFor(timeout time.Duration, what string, cond func() error, watch ...*daemon) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		for _, d := range watch {
			if err := d.exited(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		if last = cond(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: timed out after %s: %w", what, timeout, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// errMissing is returned when a binary the environment needs is not installed.
var errMissing = errors.New("missing binaries")

// lookPaths resolves binaries — the OVN and Open vSwitch ones from the OVN
// that OVN_VERSION chose (SelectedOVN), every other one on PATH — and names
// every one that is missing together with what installs it.
func lookPaths(pkgs string, names ...string) (map[string]string, error) {
	inst, err := SelectedOVN()
	if err != nil {
		return nil, err
	}
	found := map[string]string{}
	var missing, fromOVN []string
	for _, n := range names {
		p, err := inst.lookPath(n)
		if err != nil {
			missing = append(missing, n)
			if inst.BinDir != "" && ovnTools[n] {
				fromOVN = append(fromOVN, n)
			}
			continue
		}
		found[n] = p
	}
	if len(fromOVN) > 0 {
		return nil, fmt.Errorf("%w: %s not found in OVN %s's %s; prepare it with: %s",
			errMissing, strings.Join(fromOVN, ", "), inst.Version, inst.BinDir, inst.Hint)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s not found; install with: apt-get install -y --no-install-recommends %s",
			errMissing, strings.Join(missing, ", "), pkgs)
	}
	return found, nil
}

// Process is a child process a test started (see StartProcess).
type Process struct {
	d *daemon
}

// StartProcess starts bin with args as a child of the test, logging to
// dir/name.out, and stops it (SIGTERM, then SIGKILL) when t ends.
func StartProcess(t testing.TB, dir, name string, env []string, bin string, args ...string) *Process {
	t.Helper()
	d, err := startDaemon(dir, name, env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{d: d}
	t.Cleanup(func() { p.Stop() })
	return p
}

// Stop sends SIGTERM and waits up to 10 s before SIGKILL.
func (p *Process) Stop() { p.d.stop(10 * time.Second) }

// Kill sends SIGKILL.
func (p *Process) Kill() { p.d.kill() }

// Exited returns an error quoting the log if the process has exited.
func (p *Process) Exited() error { return p.d.exited() }

// Stopped reports whether the test stopped or killed the process (Stop,
// Kill), as against it exiting on its own.
func (p *Process) Stopped() bool { return p.d.stopped.Load() }

// Log returns the end of the process's output.
func (p *Process) Log(lines int) string { return tail(p.d.logPth, lines) }

// Output returns everything this process (not an earlier one logging to
// the same file) has printed so far.
func (p *Process) Output() string {
	b, err := os.ReadFile(p.d.logPth)
	if err != nil {
		return err.Error()
	}
	if int64(len(b)) < p.d.logFrom {
		return ""
	}
	return string(b[p.d.logFrom:])
}

// Pid is the process id.
func (p *Process) Pid() int { return p.d.Pid() }

// Processes is a group of child processes stopped together by one cleanup,
// registered when the group is made: checks a test registers after the
// group (cleanups run last-in first-out) still see every member running,
// however late it was started or restarted. With OVN_EGRESS_TEST_LOGS set
// to a directory, a failed test's logs of every member are copied there.
type Processes struct {
	t    testing.TB
	mu   sync.Mutex
	list []*Process
}

// NewProcesses makes an empty group whose members are stopped when t ends.
func NewProcesses(t testing.TB) *Processes {
	ps := &Processes{t: t}
	t.Cleanup(ps.stopAll)
	return ps
}

// Start starts a member, as StartProcess does.
func (ps *Processes) Start(dir, name string, env []string, bin string, args ...string) *Process {
	ps.t.Helper()
	return ps.StartThen(nil, dir, name, env, bin, args...)
}

// StartThen is Start with afterExit run once the member has exited, before
// Stop, Kill or the group's cleanup return.
func (ps *Processes) StartThen(afterExit func(), dir, name string, env []string, bin string, args ...string) *Process {
	ps.t.Helper()
	d, err := startDaemonThen(afterExit, dir, name, env, bin, args...)
	if err != nil {
		ps.t.Fatal(err)
	}
	p := &Process{d: d}
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p
}

func (ps *Processes) stopAll() {
	ps.mu.Lock()
	list := slices.Clone(ps.list)
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range list {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop() }()
	}
	wg.Wait()
	keep := os.Getenv("OVN_EGRESS_TEST_LOGS")
	if keep == "" || !ps.t.Failed() {
		return
	}
	dst := filepath.Join(keep, strings.NewReplacer("/", "_", " ", "_").Replace(ps.t.Name()))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		ps.t.Logf("keeping logs: %v", err)
		return
	}
	for _, p := range list {
		if b, err := os.ReadFile(p.d.logPth); err == nil {
			_ = os.WriteFile(filepath.Join(dst, filepath.Base(p.d.logPth)), b, 0o644)
		}
	}
	ps.t.Logf("logs of the test's processes kept in %s", dst)
}
