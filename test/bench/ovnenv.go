package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// ovnEnv is one fresh OVN control plane (NB, SB, northd from the Debian
// packages) holding the world's topology, with the bench's own watches.
type ovnEnv struct {
	o   *testenv.OVN
	dir string
	nb  *nbWatch // nil when not watched
	sb  *sbWatch
}

// startOVN starts the daemons of the central layout (startLayout).
func startOVN(ctx context.Context, w *world, watchNBRows bool) (*ovnEnv, error) {
	return startLayout(ctx, w, w.central(), watchNBRows)
}

// startLayout starts the daemons in a short temporary directory (unix
// socket paths are limited to 108 bytes), writes the layout's topology
// (buildTopology) or starts from its databases kept earlier in the run, and
// starts the watches. Without watchNB the NB server serves no monitor but
// northd's and the writer's.
func startLayout(ctx context.Context, w *world, lay layout, watchNBRows bool) (*ovnEnv, error) {
	dir, err := os.MkdirTemp("", "oeb-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	opts := testenv.OVNOptions{ReadyTimeout: w.ovnTimeout()}
	files, cached := w.cached[lay.name]
	if cached {
		opts.NBFile, opts.SBFile = files[0], files[1]
	}
	o, err := testenv.StartOVN(dir, opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start OVN: %w", err)
	}
	e := &ovnEnv{o: o, dir: dir}
	if !cached {
		if err := e.buildTopology(w, lay); err != nil {
			e.stop()
			return nil, fmt.Errorf("build topology: %w", err)
		}
		if err := e.keepTopology(w, lay); err != nil {
			e.stop()
			return nil, err
		}
	}
	if watchNBRows {
		if e.nb, err = watchNB(ctx, o.NBAddress()); err != nil {
			e.stop()
			return nil, err
		}
	}
	if e.sb, err = watchSB(ctx, o.SBAddress()); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

// keepTopology copies the databases holding just the layout's topology into
// the world's cache directory, for the next environments to start from
// (thousands of nodes take ovn-nbctl minutes to write).
func (e *ovnEnv) keepTopology(w *world, lay layout) error {
	if w.cacheDir == "" {
		return nil
	}
	e.settle()
	nb, sb := filepath.Join(w.cacheDir, lay.name+"-nb.db"), filepath.Join(w.cacheDir, lay.name+"-sb.db")
	for src, dst := range map[string]string{filepath.Join(e.dir, "nb.db"): nb, filepath.Join(e.dir, "sb.db"): sb} {
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("keep the topology: %w", err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return fmt.Errorf("keep the topology: %w", err)
		}
	}
	w.cached[lay.name] = [2]string{nb, sb}
	return nil
}

// topologyBatch is how many ovn-nbctl arguments one call gets: thousands
// of nodes' topology does not fit in one command line (ARG_MAX).
const topologyBatch = 20000

// buildTopology writes the layout's topology in ovn-nbctl calls of at most
// topologyBatch arguments, cut between commands, and waits for the SB.
// northd is paused meanwhile: it computes the whole topology once instead
// of once per call.
func (e *ovnEnv) buildTopology(w *world, lay layout) error {
	if _, err := e.o.Appctl("ovn-northd", "pause"); err != nil {
		return err
	}
	resumed := false
	defer func() {
		if !resumed {
			_, _ = e.o.Appctl("ovn-northd", "resume")
		}
	}()
	args := lay.commands()
	timeout := w.ovnTimeout()
	for len(args) > 0 {
		n := len(args)
		if n > topologyBatch {
			n = topologyBatch
			for n > 0 && args[n] != "--" {
				n-- // end the batch before the next command
			}
			if n == 0 {
				return fmt.Errorf("an ovn-nbctl command of more than %d arguments", topologyBatch)
			}
		}
		if _, err := e.o.NBCtlWithin(timeout, args[:n]...); err != nil {
			return err
		}
		args = args[n:]
	}
	resumed = true
	if _, err := e.o.Appctl("ovn-northd", "resume"); err != nil {
		return err
	}
	_, err := e.o.NBCtlWithin(timeout, "--wait=sb", "sync")
	return err
}

func (e *ovnEnv) stop() {
	if e.nb != nil {
		e.nb.close()
	}
	if e.sb != nil {
		e.sb.close()
	}
	e.o.Stop()
	os.RemoveAll(e.dir)
}

// daemonNames name the pid files of the three daemons.
func daemonNames() []string { return []string{"nb", "sb", "ovn-northd"} }

func (e *ovnEnv) pid(name string) int {
	b, err := os.ReadFile(filepath.Join(e.dir, name+".pid"))
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

// cpuTicks is the user+system CPU time of a process in clock ticks.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// settle waits until NB, SB and northd used no CPU over two consecutive
// 100 ms intervals (as nb-shapes.md did before each change), at most 20 s.
func (e *ovnEnv) settle() {
	total := func() int64 {
		var t int64
		for _, n := range daemonNames() {
			t += cpuTicks(e.pid(n))
		}
		return t
	}
	deadline := time.Now().Add(20 * time.Second)
	last, quiet := total(), 0
	for quiet < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		cur := total()
		if cur == last {
			quiet++
		} else {
			quiet = 0
		}
		last = cur
	}
}

// rssMiB reads a process's resident set (VmRSS) and peak (VmHWM) in MiB.
func rssMiB(pid int) (rss, peak float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak
}

// daemonRSS is the resident memory of NB, SB and northd in MiB.
func (e *ovnEnv) daemonRSS() map[string]float64 {
	out := map[string]float64{}
	for _, n := range daemonNames() {
		r, _ := rssMiB(e.pid(n))
		out[n] = round(r, 1)
	}
	return out
}

var engineNodeRE = regexp.MustCompile(`(?m)^Node: (\S+)\n- recompute:\s+(\d+)\n- compute:\s+(\d+)`)

// engineStats are ovn-northd's incremental-engine counters per node.
type engineStats map[string]struct{ recompute, compute int }

func (e *ovnEnv) engine() (engineStats, error) {
	out, err := e.o.Appctl("ovn-northd", "inc-engine/show-stats")
	if err != nil {
		return nil, fmt.Errorf("inc-engine/show-stats: %w", err)
	}
	st := engineStats{}
	for _, m := range engineNodeRE.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(m[2])
		c, _ := strconv.Atoi(m[3])
		st[m[1]] = struct{ recompute, compute int }{r, c}
	}
	if len(st) == 0 {
		return nil, fmt.Errorf("inc-engine/show-stats: no counters in %q", out)
	}
	return st, nil
}

func (e *ovnEnv) clearEngine() error {
	_, err := e.o.Appctl("ovn-northd", "inc-engine/clear-stats")
	return err
}

// nbLog reads the NB database file, where the standalone ovsdb-server
// appends one record per committed transaction: counting the records since
// a mark counts the transactions, independently of any client's word.
type nbLog struct{ path string }

func (e *ovnEnv) nbLog() nbLog { return nbLog{path: filepath.Join(e.dir, "nb.db")} }

func (l nbLog) mark() int64 {
	st, err := os.Stat(l.path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// txnStats counts transactions (records) since a mark, and per table the
// transactions that wrote it.
type txnStats struct {
	Transactions int            `json:"transactions"`
	ByTable      map[string]int `json:"by_table"`
}

func (l nbLog) since(off int64) (txnStats, error) {
	st := txnStats{ByTable: map[string]int{}}
	f, err := os.Open(l.path)
	if err != nil {
		return st, fmt.Errorf("open NB log: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() < off {
		return st, fmt.Errorf("NB log shrank (compacted) since the mark")
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return st, fmt.Errorf("seek NB log: %w", err)
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		header, err := r.ReadString('\n')
		if err != nil {
			return st, nil // end of the committed records
		}
		var n int
		if _, err := fmt.Sscanf(header, "OVSDB JSON %d", &n); err != nil {
			return st, fmt.Errorf("NB log: unexpected header %q", strings.TrimSpace(header))
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return st, nil
		}
		if b, err := r.Peek(1); err == nil && b[0] == '\n' {
			_, _ = r.Discard(1)
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(body, &rec); err != nil {
			return st, fmt.Errorf("NB log record: %w", err)
		}
		st.Transactions++
		for t := range rec {
			if !strings.HasPrefix(t, "_") {
				st.ByTable[t]++
			}
		}
	}
}
