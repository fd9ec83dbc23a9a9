package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// raftNB is a RAFT-clustered OVN NB database: one ovsdb-server per member,
// each listening for clients on its own unix socket and on 127.0.0.1, the
// members talking RAFT over 127.0.0.1.
type raftNB struct {
	dir     string
	env     []string
	bins    map[string]string
	members []*daemon
	frozen  []bool   // stopped with SIGSTOP
	socks   []string // unix socket path per member
	tcp     []string // tcp:127.0.0.1:PORT per member
	args    [][]string
}

// newRaftNB creates the database files of an n-member cluster in dir (the
// first member creates the cluster, the others join it); start runs them.
func newRaftNB(bins map[string]string, dir string, env []string, n int) (*raftNB, error) {
	ports, err := FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	inst, err := SelectedOVN()
	if err != nil {
		return nil, err
	}
	r := &raftNB{dir: dir, env: env, bins: bins, members: make([]*daemon, n), frozen: make([]bool, n)}
	raft := func(i int) string { return fmt.Sprintf("tcp:127.0.0.1:%d", ports[n+i]) }
	for i := range n {
		db := filepath.Join(dir, fmt.Sprintf("nb%d.db", i))
		cmd := exec.Command(bins["ovsdb-tool"], "create-cluster", db, inst.NBSchema(), raft(0))
		if i > 0 {
			cmd = exec.Command(bins["ovsdb-tool"], "join-cluster", db, "OVN_Northbound", raft(i), raft(0))
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", cmd, err, out)
		}
		sock := filepath.Join(dir, fmt.Sprintf("nb%d.sock", i))
		r.socks = append(r.socks, sock)
		r.tcp = append(r.tcp, fmt.Sprintf("tcp:127.0.0.1:%d", ports[i]))
		r.args = append(r.args, []string{db, "--no-chdir", "-vconsole:off", "-vfile:info",
			"--log-file=" + filepath.Join(dir, fmt.Sprintf("nb%d.log", i)), "--unixctl=" + r.ctl(i),
			"--remote=punix:" + sock, "--remote=ptcp:" + fmt.Sprint(ports[i]) + ":127.0.0.1"})
	}
	return r, nil
}

func (r *raftNB) ctl(i int) string { return filepath.Join(r.dir, fmt.Sprintf("nb%d.ctl", i)) }

// start (re)starts member i on its database file and waits for its sockets.
func (r *raftNB) start(i int) error {
	if r.members[i] != nil && r.members[i].exited() == nil {
		return fmt.Errorf("NB member %d already running", i)
	}
	_ = os.Remove(r.socks[i])
	d, err := startDaemon(r.dir, fmt.Sprintf("nb%d", i), r.env, r.bins["ovsdb-server"], r.args[i]...)
	if err != nil {
		return err
	}
	if err := waitFor(10*time.Second, fmt.Sprintf("NB member %d's sockets", i), func() error {
		if _, err := os.Stat(r.ctl(i)); err != nil {
			return err
		}
		_, err := os.Stat(r.socks[i])
		return err
	}, d); err != nil {
		d.kill()
		return err
	}
	r.members[i] = d
	return nil
}

// startAll starts every member not running and waits until one leads.
func (r *raftNB) startAll() error {
	for i, m := range r.members {
		if m == nil || m.exited() != nil {
			if err := r.start(i); err != nil {
				return err
			}
		}
	}
	return waitFor(30*time.Second, "an NB cluster leader", func() error {
		if r.leader() < 0 {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})
}

// kill kills member i with SIGKILL.
func (r *raftNB) kill(i int) {
	if r.members[i] != nil {
		r.members[i].kill()
	}
	r.frozen[i] = false
	os.Remove(r.ctl(i))
}

// freeze stops member i with SIGSTOP: a hung server, whose kernel keeps
// its connections open and acknowledged while nothing answers; thaw
// continues it.
func (r *raftNB) freeze(i int) {
	_ = syscall.Kill(r.members[i].Pid(), syscall.SIGSTOP)
	r.frozen[i] = true
}

func (r *raftNB) thaw(i int) {
	if r.frozen[i] {
		_ = syscall.Kill(r.members[i].Pid(), syscall.SIGCONT)
		r.frozen[i] = false
	}
}

// stopAll stops every member gracefully (a frozen one is continued first).
func (r *raftNB) stopAll() {
	for i, m := range r.members {
		if m != nil {
			r.thaw(i)
			m.stop(5 * time.Second)
		}
	}
}

// leader returns the index of the member that is leader, or -1.
func (r *raftNB) leader() int {
	for i, m := range r.members {
		if m == nil || m.exited() != nil || r.frozen[i] {
			continue
		}
		out, err := exec.Command(r.bins["ovs-appctl"], "--timeout=2", "-t", r.ctl(i), "cluster/status", "OVN_Northbound").CombinedOutput()
		if err == nil && strings.Contains(string(out), "Role: leader") {
			return i
		}
	}
	return -1
}

// unixAddress lists the members' unix sockets, as OVN's clients take a
// cluster's remotes: every member's, or (live) only those running — for
// ovn-nbctl, which tries one shuffled remote once and fails when it is down.
func (r *raftNB) unixAddress(live bool) string {
	var a []string
	for i, s := range r.socks {
		if !live || (r.members[i] != nil && r.members[i].exited() == nil && !r.frozen[i]) {
			a = append(a, "unix:"+s)
		}
	}
	return strings.Join(a, ",")
}

// NBCluster is a RAFT-clustered OVN NB database of several ovsdb-server
// members on 127.0.0.1 (no SB, no northd): for the client's leader-only and
// failover behaviour.
type NBCluster struct {
	Dir string
	r   *raftNB
}

// NewNBCluster creates and starts an n-member NB cluster; it is stopped
// when t ends.
func NewNBCluster(t testing.TB, n int) *NBCluster {
	t.Helper()
	bins, err := lookPaths(OVNPackages, "ovsdb-tool", "ovsdb-server", "ovs-appctl", "ovn-nbctl")
	if err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t)
	r, err := newRaftNB(bins, dir, nil, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stopAll)
	if err := r.startAll(); err != nil {
		t.Fatal(err)
	}
	return &NBCluster{Dir: dir, r: r}
}

// Start (re)starts member i.
func (c *NBCluster) Start(t testing.TB, i int) {
	t.Helper()
	if err := c.r.start(i); err != nil {
		t.Fatal(err)
	}
}

// Kill kills member i with SIGKILL.
func (c *NBCluster) Kill(i int) { c.r.kill(i) }

// Freeze stops member i with SIGSTOP (a hung server); Thaw continues it.
func (c *NBCluster) Freeze(i int) { c.r.freeze(i) }

// Thaw continues member i after Freeze.
func (c *NBCluster) Thaw(i int) { c.r.thaw(i) }

// Addresses are the members' client endpoints (tcp:127.0.0.1:PORT).
func (c *NBCluster) Addresses() []string { return c.r.tcp }

// Leader returns the index of the member that is leader, or -1.
func (c *NBCluster) Leader() int { return c.r.leader() }

// NBCtl runs ovn-nbctl against the cluster (leader-only, as nbctl does).
func (c *NBCluster) NBCtl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.r.bins["ovn-nbctl"], append([]string{"--db=" + strings.Join(c.r.tcp, ","), "--timeout=30"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ovn-nbctl %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
