package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NBCluster is a RAFT-clustered OVN NB database of several ovsdb-server
// members on 127.0.0.1 (no SB, no northd): for the client's leader-only and
// failover behaviour.
type NBCluster struct {
	Dir     string
	bins    map[string]string
	members []*daemon
	clients []string // tcp:127.0.0.1:PORT per member
	args    [][]string
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
	ports, err := FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	c := &NBCluster{Dir: dir, bins: bins}
	inst, _ := SelectedOVN() // lookPaths failed if it did
	raft := func(i int) string { return fmt.Sprintf("tcp:127.0.0.1:%d", ports[n+i]) }
	for i := 0; i < n; i++ {
		db := filepath.Join(dir, fmt.Sprintf("nb%d.db", i))
		var cmd *exec.Cmd
		if i == 0 {
			cmd = exec.Command(bins["ovsdb-tool"], "create-cluster", db, inst.NBSchema(), raft(0))
		} else {
			cmd = exec.Command(bins["ovsdb-tool"], "join-cluster", db, "OVN_Northbound", raft(i), raft(0))
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", cmd, err, out)
		}
		c.clients = append(c.clients, fmt.Sprintf("tcp:127.0.0.1:%d", ports[i]))
		c.args = append(c.args, []string{db, "--no-chdir", "-vconsole:off", "-vfile:info",
			"--log-file=" + filepath.Join(dir, fmt.Sprintf("nb%d.log", i)), "--unixctl=" + c.ctl(i),
			"--remote=ptcp:" + fmt.Sprint(ports[i]) + ":127.0.0.1"})
		c.members = append(c.members, nil)
	}
	for i := range c.members {
		c.Start(t, i)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			if m != nil {
				m.stop(5 * time.Second)
			}
		}
	})
	if err := waitFor(20*time.Second, "cluster leader", func() error {
		if c.Leader() < 0 {
			return fmt.Errorf("no leader yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *NBCluster) ctl(i int) string { return filepath.Join(c.Dir, fmt.Sprintf("nb%d.ctl", i)) }

// Start (re)starts member i.
func (c *NBCluster) Start(t testing.TB, i int) {
	t.Helper()
	d, err := startDaemon(c.Dir, fmt.Sprintf("nb%d", i), nil, c.bins["ovsdb-server"], c.args[i]...)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(10*time.Second, "member control socket", func() error { _, err := os.Stat(c.ctl(i)); return err }, d); err != nil {
		t.Fatal(err)
	}
	c.members[i] = d
}

// Kill kills member i with SIGKILL.
func (c *NBCluster) Kill(i int) {
	c.members[i].kill()
	os.Remove(c.ctl(i))
}

// Addresses are the members' client endpoints.
func (c *NBCluster) Addresses() []string { return c.clients }

// Leader returns the index of the member that is leader, or -1.
func (c *NBCluster) Leader() int {
	for i, m := range c.members {
		if m == nil || m.exited() != nil {
			continue
		}
		out, err := exec.Command(c.bins["ovs-appctl"], "-t", c.ctl(i), "cluster/status", "OVN_Northbound").CombinedOutput()
		if err == nil && strings.Contains(string(out), "Role: leader") {
			return i
		}
	}
	return -1
}

// NBCtl runs ovn-nbctl against the cluster (leader-only, as nbctl does).
func (c *NBCluster) NBCtl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.bins["ovn-nbctl"], append([]string{"--db=" + strings.Join(c.clients, ","), "--timeout=30"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ovn-nbctl %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
