// Package testenv starts the real components the project is tested against:
// OVN NB/SB ovsdb-server and ovn-northd from Debian's packages, a real
// kube-apiserver with etcd, and helpers around them. Everything runs as child
// processes of the test binary, in a temporary directory, listening only on
// unix sockets or 127.0.0.1, and is stopped by pid when the test ends.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// OVNPackages are the Debian packages that hold the binaries OVN needs.
const OVNPackages = "ovn-central ovn-common openvswitch-common"

// OVN is one standalone OVN control plane: NB and SB ovsdb-server plus ovn-northd.
type OVN struct {
	Dir string

	bins           map[string]string
	nb, sb, northd *daemon
	nbSock, sbSock string
	nbTCP          string
	nbSSL          string
	raft           *raftNB // with NBMembers > 1, instead of nb
	opts           OVNOptions
	// PKI holds the certificates when started with NBSSL.
	PKI *PKI
	env []string
}

// OVNOptions tune StartOVN.
type OVNOptions struct {
	// NBTCP also listens for NB clients on a free 127.0.0.1 port.
	NBTCP bool
	// NoNorthd skips ovn-northd (and SB readiness waits on it).
	NoNorthd bool
	// NBSSL also listens for NB clients over TLS on a free 127.0.0.1 port,
	// with a throw-away PKI (OVN.PKI); clients must present a certificate.
	NBSSL bool
	// NBMembers > 1 runs the NB as a RAFT cluster of that many members,
	// each on its own unix socket and 127.0.0.1 port (NBAddress lists them
	// all; NBTCPAddresses the ports). NBTCP and NBSSL do not apply.
	NBMembers int
	// NBFile and SBFile, when set, start the databases from copies of these
	// files (a topology written once, reused) instead of empty ones.
	NBFile, SBFile string
	// ReadyTimeout bounds northd's first sync (30 s when zero): a large NB
	// takes northd longer to compute.
	ReadyTimeout time.Duration
}

// NewOVN starts NB, SB and northd in a temporary directory of t and stops them
// when t ends. Missing binaries fail the test with the packages to install.
func NewOVN(t testing.TB, opts ...OVNOptions) *OVN {
	t.Helper()
	var o OVNOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ovn, err := StartOVN(shortTempDir(t), o)
	if err != nil {
		t.Fatalf("start OVN: %v", err)
	}
	t.Cleanup(ovn.Stop)
	return ovn
}

// shortTempDir returns a temporary directory whose path is short enough for
// unix socket names (108 bytes), removed when t ends.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ovneg-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// StartOVN creates fresh NB and SB databases in dir and starts the daemons.
// It returns once ovn-northd has synced NB to SB.
func StartOVN(dir string, opts OVNOptions) (*OVN, error) {
	bins, err := lookPaths(OVNPackages, "ovsdb-tool", "ovsdb-server", "ovn-northd", "ovn-nbctl", "ovn-sbctl", "ovs-appctl")
	if err != nil {
		return nil, err
	}
	o := &OVN{Dir: dir, bins: bins, opts: opts,
		nbSock: filepath.Join(dir, "nb.sock"), sbSock: filepath.Join(dir, "sb.sock")}
	o.env = []string{"OVS_RUNDIR=" + dir, "OVN_RUNDIR=" + dir, "OVS_LOGDIR=" + dir, "OVN_LOGDIR=" + dir, "OVS_DBDIR=" + dir}
	inst, _ := SelectedOVN() // lookPaths failed if it did
	dbs := []struct{ file, schema string }{{"sb.db", inst.SBSchema()}}
	if opts.NBMembers <= 1 {
		dbs = append(dbs, struct{ file, schema string }{"nb.db", inst.NBSchema()})
	}
	from := map[string]string{"nb.db": opts.NBFile, "sb.db": opts.SBFile}
	for _, db := range dbs {
		if src := from[db.file]; src != "" {
			if err := copyFile(src, filepath.Join(dir, db.file)); err != nil {
				return nil, err
			}
			continue
		}
		if out, err := exec.Command(bins["ovsdb-tool"], "create", filepath.Join(dir, db.file), db.schema).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ovsdb-tool create %s: %v: %s", db.file, err, out)
		}
	}
	if opts.NBSSL {
		if o.PKI, err = WritePKI(dir); err != nil {
			return nil, err
		}
	}
	if opts.NBMembers > 1 {
		if o.raft, err = newRaftNB(bins, dir, o.env, opts.NBMembers); err != nil {
			return nil, err
		}
	}
	if err := o.StartNB(); err != nil {
		o.Stop()
		return nil, err
	}
	if o.sb, err = o.startDB("sb"); err != nil {
		o.Stop()
		return nil, err
	}
	if !opts.NoNorthd {
		o.northd, err = startDaemon(dir, "ovn-northd", o.env, bins["ovn-northd"],
			"--no-chdir", "-vconsole:off", "-vfile:info",
			"--pidfile="+filepath.Join(dir, "ovn-northd.pid"), "--log-file="+filepath.Join(dir, "ovn-northd.log"),
			"--unixctl="+filepath.Join(dir, "ovn-northd.ctl"),
			"--ovnnb-db="+o.NBAddress(), "--ovnsb-db="+o.SBAddress())
		if err != nil {
			o.Stop()
			return nil, err
		}
		ready := opts.ReadyTimeout
		if ready == 0 {
			ready = 30 * time.Second
		}
		if _, err := o.nbctl(ready, "--wait=sb", "sync"); err != nil {
			o.Stop()
			return nil, fmt.Errorf("northd readiness: %w\n%s", err, tail(filepath.Join(dir, "ovn-northd.log"), 20))
		}
	}
	return o, nil
}

// copyFile copies a database file.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, 0o640); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}

var listenPortRE = regexp.MustCompile(`0:127\.0\.0\.1: listening on port (\d+)`)

func (o *OVN) startDB(db string) (*daemon, error) {
	sock := filepath.Join(o.Dir, db+".sock")
	args := []string{filepath.Join(o.Dir, db+".db"), "--no-chdir", "-vconsole:off", "-vfile:info",
		"--pidfile=" + filepath.Join(o.Dir, db+".pid"), "--log-file=" + filepath.Join(o.Dir, db+".log"),
		"--unixctl=" + filepath.Join(o.Dir, db+".ctl"), "--remote=punix:" + sock}
	if db == "nb" && o.opts.NBTCP {
		port := "0"
		if o.nbTCP != "" { // keep the port across restarts
			port = o.nbTCP[strings.LastIndex(o.nbTCP, ":")+1:]
		}
		args = append(args, "--remote=ptcp:"+port+":127.0.0.1")
	}
	if db == "nb" && o.opts.NBSSL {
		port := "0"
		if o.nbSSL != "" {
			port = o.nbSSL[strings.LastIndex(o.nbSSL, ":")+1:]
		}
		args = append(args, "--remote=pssl:"+port+":127.0.0.1", "--private-key="+o.PKI.ServerKey,
			"--certificate="+o.PKI.ServerCert, "--ca-cert="+o.PKI.CACert)
	}
	d, err := startDaemon(o.Dir, db, o.env, o.bins["ovsdb-server"], args...)
	if err != nil {
		return nil, err
	}
	err = waitFor(10*time.Second, db+" socket", func() error {
		_, err := os.Stat(sock)
		return err
	}, d)
	want := 0
	if db == "nb" && o.opts.NBTCP && o.nbTCP == "" {
		want++
	}
	if db == "nb" && o.opts.NBSSL && o.nbSSL == "" {
		want++
	}
	if err == nil && want > 0 {
		// With port 0 the log says which ports were bound, in the order the
		// remotes were given (tcp first).
		err = waitFor(10*time.Second, "nb ports", func() error {
			b, _ := os.ReadFile(filepath.Join(o.Dir, db+".log"))
			m := listenPortRE.FindAllSubmatch(b, -1)
			if len(m) < want {
				return fmt.Errorf("no listening line yet")
			}
			i := 0
			if o.opts.NBTCP && o.nbTCP == "" {
				o.nbTCP = "tcp:127.0.0.1:" + string(m[i][1])
				i++
			}
			if o.opts.NBSSL && o.nbSSL == "" {
				o.nbSSL = "ssl:127.0.0.1:" + string(m[i][1])
			}
			return nil
		}, d)
	}
	if err != nil {
		d.kill()
		return nil, err
	}
	return d, nil
}

// StartNB starts (or restarts after StopNB/KillNB) the NB ovsdb-server on the
// same database file and socket; a RAFT NB's members not running, waiting
// until one of them leads.
func (o *OVN) StartNB() error {
	if o.raft != nil {
		return o.raft.startAll()
	}
	if o.nb != nil && o.nb.exited() == nil {
		return fmt.Errorf("nb ovsdb-server already running")
	}
	_ = os.Remove(o.nbSock)
	nb, err := o.startDB("nb")
	if err != nil {
		return err
	}
	o.nb = nb
	return nil
}

// StopNB stops the NB ovsdb-server (every member of a RAFT NB) gracefully.
func (o *OVN) StopNB() {
	if o.raft != nil {
		o.raft.stopAll()
		return
	}
	o.nb.stop(5 * time.Second)
}

// KillNB kills the NB ovsdb-server (every member of a RAFT NB) with SIGKILL.
func (o *OVN) KillNB() {
	if o.raft != nil {
		for i := range o.raft.members {
			o.raft.kill(i)
		}
		return
	}
	o.nb.kill()
}

// KillNBLeader kills the leader of a RAFT NB with SIGKILL and returns its
// index (-1: no member leads now, or the NB is not clustered).
func (o *OVN) KillNBLeader() int {
	if o.raft == nil {
		return -1
	}
	i := o.raft.leader()
	if i >= 0 {
		o.raft.kill(i)
	}
	return i
}

// FreezeNBLeader stops the leader of a RAFT NB with SIGSTOP — a hung
// server: its connections stay open, nothing answers, the others elect a
// new leader — and returns its index (-1: none leads, or not clustered).
func (o *OVN) FreezeNBLeader() int {
	if o.raft == nil {
		return -1
	}
	i := o.raft.leader()
	if i >= 0 {
		o.raft.freeze(i)
	}
	return i
}

// ThawNBMember continues member i after FreezeNBLeader.
func (o *OVN) ThawNBMember(i int) {
	if o.raft != nil {
		o.raft.thaw(i)
	}
}

// StartNBMember restarts member i of a RAFT NB on its database file.
func (o *OVN) StartNBMember(i int) error {
	if o.raft == nil {
		return fmt.Errorf("the NB is not clustered")
	}
	return o.raft.start(i)
}

// Stop stops northd, SB and NB, in that order. Safe to call twice.
func (o *OVN) Stop() {
	for _, d := range []*daemon{o.northd, o.sb, o.nb} {
		if d != nil {
			d.stop(5 * time.Second)
		}
	}
	if o.raft != nil {
		o.raft.stopAll()
	}
}

// NBAddress is the OVSDB address of the NB database (unix:...; a RAFT NB's
// members' sockets, comma-separated).
func (o *OVN) NBAddress() string {
	if o.raft != nil {
		return o.raft.unixAddress(false)
	}
	return "unix:" + o.nbSock
}

// NBTCPAddresses are a RAFT NB's members' tcp:127.0.0.1:PORT endpoints, or
// the NB's one when started with NBTCP.
func (o *OVN) NBTCPAddresses() []string {
	if o.raft != nil {
		return o.raft.tcp
	}
	if o.nbTCP != "" {
		return []string{o.nbTCP}
	}
	return nil
}

// NBTCPAddress is tcp:127.0.0.1:PORT when started with NBTCP.
func (o *OVN) NBTCPAddress() string { return o.nbTCP }

// NBSSLAddress is ssl:127.0.0.1:PORT when started with NBSSL.
func (o *OVN) NBSSLAddress() string { return o.nbSSL }

// SBAddress is the OVSDB address of the SB database (unix:...).
func (o *OVN) SBAddress() string { return "unix:" + o.sbSock }

// NorthdCtl is the path of ovn-northd's unixctl socket (for ovn-appctl -t).
func (o *OVN) NorthdCtl() string { return filepath.Join(o.Dir, "ovn-northd.ctl") }

// NBCtl runs ovn-nbctl against the NB database and returns its trimmed stdout.
func (o *OVN) NBCtl(args ...string) (string, error) { return o.nbctl(30*time.Second, args...) }

// NBCtlWithin is NBCtl with a longer budget than its 30 s (a topology of
// thousands of nodes, or --wait=sb while northd computes it).
func (o *OVN) NBCtlWithin(timeout time.Duration, args ...string) (string, error) {
	return o.nbctl(timeout, args...)
}

// SBCtl runs ovn-sbctl against the SB database and returns its trimmed stdout.
func (o *OVN) SBCtl(args ...string) (string, error) {
	return o.run("ovn-sbctl", append([]string{"--db=" + o.SBAddress(), "--timeout=30"}, args...)...)
}

// Appctl runs ovs-appctl against one of the daemons' control sockets
// ("nb", "sb" or "ovn-northd").
func (o *OVN) Appctl(target string, args ...string) (string, error) {
	return o.run("ovs-appctl", append([]string{"-t", filepath.Join(o.Dir, target+".ctl")}, args...)...)
}

// Trace runs ovn-trace against the SB database.
func (o *OVN) Trace(args ...string) (string, error) {
	bins, err := lookPaths("ovn-common", "ovn-trace")
	if err != nil {
		return "", err
	}
	o.bins["ovn-trace"] = bins["ovn-trace"]
	return o.run("ovn-trace", append([]string{"--db=" + o.SBAddress()}, args...)...)
}

func (o *OVN) nbctl(timeout time.Duration, args ...string) (string, error) {
	if o.raft == nil {
		return o.runFor(max(60*time.Second, timeout+10*time.Second), "ovn-nbctl",
			append([]string{"--db=" + o.NBAddress(), fmt.Sprintf("--timeout=%d", int(timeout.Seconds()))}, args...)...)
	}
	// ovn-nbctl tries one remote once: a member that is down, or one that
	// follows while the cluster elects a leader, fails it. Ask the running
	// members again until one of them leads.
	deadline := time.Now().Add(timeout)
	for {
		out, err := o.run("ovn-nbctl", append([]string{"--db=" + o.raft.unixAddress(true), fmt.Sprintf("--timeout=%d", int(timeout.Seconds()))}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "database connection failed") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (o *OVN) run(bin string, args ...string) (string, error) {
	return o.runFor(60*time.Second, bin, args...)
}

// runFor is run with the command killed after limit.
func (o *OVN) runFor(limit time.Duration, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.bins[bin], args...)
	cmd.Env = append(os.Environ(), o.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// MustNBCtl is NBCtl that fails t on error.
func (o *OVN) MustNBCtl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := o.NBCtl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// MustSBCtl is SBCtl that fails t on error.
func (o *OVN) MustSBCtl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := o.SBCtl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SNATs reports whether router gr has a snat row owned by ovn-egress that
// gives ep the external address ext ("": any): one row per endpoint
// (logical_ip ep), or a row whose match names an address set holding ep
// (NAT.match).
func (o *OVN) SNATs(t testing.TB, gr, ext, ep string) bool {
	t.Helper()
	onGR := o.MustNBCtl(t, "get", "Logical_Router", gr, "nat")
	find := []string{"--bare", "--columns=_uuid", "find", "NAT", "external_ids:k8s.ovn.org/owner-controller=ovn-egress"}
	if ext != "" {
		find = append(find, "external_ip="+ext)
	}
	for _, u := range strings.Fields(o.MustNBCtl(t, find...)) {
		if !strings.Contains(onGR, u) {
			continue
		}
		if o.MustNBCtl(t, "get", "NAT", u, "logical_ip") == `"`+ep+`"` {
			return true
		}
		m, err := o.NBCtl("get", "NAT", u, "match")
		if err != nil { // no NAT.match in this NB
			continue
		}
		if _, set, ok := strings.Cut(m, "$"); ok {
			set, _, _ = strings.Cut(strings.Trim(set, `"`), " ")
			if strings.Contains(o.MustNBCtl(t, "get", "Address_Set", set, "addresses"), `"`+ep+`"`) {
				return true
			}
		}
	}
	return false
}

// ReroutesTo reports whether one of ovn-egress's reroute policies has the
// next hop nexthop (the topology's own policies, 1004 to the management
// ports, do not count).
func (o *OVN) ReroutesTo(t testing.TB, nexthop string) bool {
	t.Helper()
	out := o.MustNBCtl(t, "--bare", "--columns=nexthops", "find", "Logical_Router_Policy",
		"external_ids:k8s.ovn.org/owner-controller=ovn-egress", "action=reroute")
	return slices.Contains(strings.Fields(out), nexthop)
}
