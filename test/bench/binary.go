package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	kubeinformers "k8s.io/client-go/informers"

	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// productBinary builds cmd/ovn-egress once per run.
func (b *bench) productBinary(ctx context.Context) (string, error) {
	if b.bin != "" {
		return b.bin, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(b.tmp, "ovn-egress")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ovn-egress")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ovn-egress: %w\n%s", err, out)
	}
	b.bin = bin
	return bin, nil
}

// proc is a product process whose log lines are timestamped on arrival.
type proc struct {
	cmd   *exec.Cmd
	start time.Time
	mu    sync.Mutex
	lines []timedLine
	done  chan struct{}
}

type timedLine struct {
	at   time.Time
	text string
}

func startProc(bin, logPath string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", logPath, err)
	}
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	p.cmd.Stdout = f
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		defer close(p.done)
		defer f.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			at := time.Now()
			p.mu.Lock()
			p.lines = append(p.lines, timedLine{at, sc.Text()})
			p.mu.Unlock()
			fmt.Fprintln(f, sc.Text())
		}
	}()
	return p, nil
}

// waitLine returns when a log line containing s arrived.
func (p *proc) waitLine(ctx context.Context, s string) (timedLine, error) {
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.Contains(l.text, s) {
				p.mu.Unlock()
				return l, nil
			}
		}
		p.mu.Unlock()
		select {
		case <-p.done:
			return timedLine{}, fmt.Errorf("process exited before logging %q; last lines: %s", s, p.tail(5))
		case <-ctx.Done():
			return timedLine{}, fmt.Errorf("waiting for %q: %w; last lines: %s", s, ctx.Err(), p.tail(5))
		case <-time.After(time.Millisecond):
		}
	}
}

func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines[max(0, len(p.lines)-n):] {
		out = append(out, l.text)
	}
	return strings.Join(out, " | ")
}

// stop sends SIGTERM, then SIGKILL after 10 s, and reaps the process.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = p.cmd.Wait()
}

// listTime is how long a fresh set of the master's informers takes to list
// the objects from the API server: the "time to list" of DESIGN §6.
func (b *bench) listTime(ctx context.Context, a *apiEnv) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kf := kubeinformers.NewSharedInformerFactory(a.client, 0)
	ef := egressinformers.NewSharedInformerFactory(a.egress, 0)
	kf.Core().V1().Nodes().Informer()
	kf.Core().V1().Services().Informer()
	kf.Discovery().V1().EndpointSlices().Informer()
	ef.K8s().V1().EgressServices().Informer()
	start := time.Now()
	kf.Start(ctx.Done())
	ef.Start(ctx.Done())
	for _, ok := range kf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return 0, fmt.Errorf("informers did not sync")
		}
	}
	for _, ok := range ef.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return 0, fmt.Errorf("informers did not sync")
		}
	}
	d := time.Since(start)
	cancel()
	kf.Shutdown()
	ef.Shutdown()
	return d, nil
}

// convergeBinary runs the product binary (`ovn-egress master`) against the
// real API server on a fresh NB: converge time, transactions, peak RSS,
// then a restart with nothing changed (NB writes must be 0).
func (b *bench) convergeBinary(ctx context.Context, r *result, lim rawWrite) error {
	a, objs, err := b.hostedCluster(ctx)
	if err != nil {
		return err
	}
	// The node agents' readiness reports, as agents that programmed
	// everything would publish them (the host path waits for them).
	if err := a.writeReports(ctx, objs, b.w.topo.ClusterSubnets); err != nil {
		return err
	}
	if objs, err = a.snapshot(ctx); err != nil {
		return err
	}
	want := indexDesired(desired(b.w.config(translate.BackendHost), objs))
	list, err := b.listTime(ctx, a)
	if err != nil {
		return err
	}
	bin, err := b.productBinary(ctx)
	if err != nil {
		return err
	}
	b.step("the master binary against the real API server")
	env, err := startOVN(ctx, b.w, true)
	if err != nil {
		return err
	}
	defer env.stop()
	subnets := make([]string, 0, len(b.w.topo.ClusterSubnets))
	for _, p := range b.w.topo.ClusterSubnets {
		subnets = append(subnets, p.String())
	}
	// The world's pod networks (the envelope's are not the default's):
	// without them selection finds no cluster-networked endpoint and clears
	// every host.
	args := []string{"master", "--kubeconfig", a.kube.Kubeconfig, "--nb-address", env.o.NBAddress(),
		"--leader-elect=false", "--health-interval=0", "--log-level=info", "--cluster-subnets", strings.Join(subnets, ",")}
	mark := env.nbLog().mark()
	env.sb.markBase()
	p, err := startProc(bin, filepath.Join(b.tmp, "master-1.log"), args...)
	if err != nil {
		return err
	}
	wctx, cancel := within(ctx, 10*time.Minute)
	defer cancel()
	nbDone, err := env.nb.wait(wctx, "NB complete (binary)", env.nb.complete(want))
	var sbDone time.Time
	if err == nil {
		sbDone, err = env.sb.wait(wctx, "SB complete (binary)", env.sb.complete(want))
	}
	var synced timedLine
	if err == nil {
		synced, err = p.waitLine(wctx, "translation controller started")
	}
	if err != nil {
		p.stop()
		return wrap("master binary", err)
	}
	time.Sleep(2 * time.Second)
	rss, peak := rssMiB(p.cmd.Process.Pid)
	tx, err := env.nbLog().since(mark)
	p.stop()
	if err != nil {
		return err
	}
	r.seconds("master binary (API server): time to list the objects (bare informers)", list)
	r.seconds("master binary: process start → informers synced (log)", synced.at.Sub(p.start))
	r.seconds("master binary: informers synced → NB complete", nbDone.Sub(synced.at))
	r.seconds("master binary: informers synced → SB complete", sbDone.Sub(synced.at))
	r.seconds("master binary: process start → NB complete", nbDone.Sub(p.start))
	r.metric("master binary: NB transactions (NB log)", float64(tx.Transactions), "transactions")
	r.metric("master binary: RSS after converging", rss, "MiB")
	r.metric("master binary: peak RSS (VmHWM)", peak, "MiB")
	r.Details["binary_nb_log"] = tx
	translationCheck(r, "translation: synced → NB complete (binary, real API server)", nbDone.Sub(synced.at), lim, list)
	rssLimit := 300.0 // DESIGN §6 at the default size
	if b.w.size.Mix == mixEnvelope {
		rssLimit = 1024 // issue 18 at the envelope
	}
	r.check("master peak RSS at this size", peak, "MiB", "<", rssLimit, fmt.Sprintf("%.0f MiB", peak), fmt.Sprintf("< %.0f MiB", rssLimit))

	// Restart with nothing changed: every NB write is a defect.
	b.step("restarting the master binary")
	env.settle()
	mark = env.nbLog().mark()
	p, err = startProc(bin, filepath.Join(b.tmp, "master-2.log"), args...)
	if err != nil {
		return err
	}
	synced, err = p.waitLine(wctx, "translation controller started")
	if err == nil {
		_, err = p.waitLine(wctx, "startup repair done")
	}
	if err != nil {
		p.stop()
		return wrap("restarted master binary", err)
	}
	time.Sleep(3 * time.Second)
	env.settle()
	tx, err = env.nbLog().since(mark)
	p.stop()
	if err != nil {
		return err
	}
	r.seconds("master binary restart: process start → informers synced", synced.at.Sub(p.start))
	r.metric("master binary restart: NB transactions within 3 s after synced", float64(tx.Transactions), "transactions")
	r.Details["binary_restart_nb_log"] = tx
	r.check("restart of the binary with nothing changed: NB writes", float64(tx.Transactions), "transactions", "==", 0,
		fmt.Sprintf("%d", tx.Transactions), "0")
	return nil
}
