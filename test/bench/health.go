package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// probeLog wraps the master's prober and keeps every probe's duration and
// verdict (the wrapper costs a mutex per probe, nothing next to a connect).
type probeLog struct {
	p      selection.Prober
	mu     sync.Mutex
	took   latencies
	failed map[string]int
}

func (l *probeLog) Probe(ctx context.Context, node string, addrs []netip.Addr) error {
	start := time.Now()
	err := l.p.Probe(ctx, node, addrs)
	d := time.Since(start)
	l.mu.Lock()
	l.took = append(l.took, d)
	if err != nil {
		l.failed[node]++
	}
	l.mu.Unlock()
	return err
}

func (l *probeLog) reset() {
	l.mu.Lock()
	l.took, l.failed = nil, map[string]int{}
	l.mu.Unlock()
}

// loopbackPort is a TCP port on 127.0.0.1 nothing listens on: a connect to
// it is refused at once, as the discard port of a host is (the default
// probe, mode any, counts the refusal as an answer).
func loopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a loopback port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// runHealth (issue 18 item 1): the probe load of the master's health checks
// when every node hosts a service — the master's own selection controller
// and TCP prober with the default interval, timeout and mode, every host's
// probe redirected to a refused port on 127.0.0.1 (the bench sends nothing
// anywhere else) — against the limit: a bare loop making the same connects
// with the same parallelism and no controller. Both for the same window;
// CPU is this process's (nothing else runs in it meanwhile).
func (b *bench) runHealth(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 10*time.Minute)
	defer cancel()
	port, err := loopbackPort()
	if err != nil {
		return err
	}
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var d net.Dialer
	redirect := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, target)
	}

	objs := b.w.objects(true)
	hosts := map[string]bool{}
	for s := 0; s < b.w.size.Services; s++ {
		hosts[b.w.nodeName(b.w.host(s))] = true
	}
	sc := selection.DefaultConfig()
	sc.HealthMaxRate = b.opts.healthMaxRate
	interval := sc.ProbeInterval(len(hosts))
	reg := prometheus.NewRegistry()
	sc.Metrics = selection.NewMetrics(reg)
	plog := &probeLog{p: &selection.TCPProber{Port: port, Mode: sc.HealthCheckMode, Dial: redirect}, failed: map[string]int{}}
	sc.Prober = plog
	window := b.opts.healthWindow

	b.step("health checks of %d hosts by the master's selection controller (interval %v, at most %d probes/s: every host each %v; timeout %v) for %v",
		len(hosts), sc.HealthInterval, sc.HealthMaxRate, interval, sc.HealthTimeout, window)
	st, err := startStack(ctx, stackOpts{kube: kubefake.NewSimpleClientset(objs.kubeObjects()...),
		egress: egressfake.NewSimpleClientset(objs.egressObjects()...), recorder: &record.FakeRecorder{}, cfg: b.w.config(translate.BackendHost), selection: &sc}, b.log)
	if err != nil {
		return err
	}
	for (st.sel.HealthRounds() < 3 || !st.sel.Idle()) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // past the start: repair done, probing steady
	}
	plog.reset()
	changes0 := hostChanges(reg)
	rounds0 := st.sel.HealthRounds()
	cpu0, t0 := cpuTicks(os.Getpid()), time.Now()
	sleepCtx(ctx, window)
	cpu1, t1 := cpuTicks(os.Getpid()), time.Now()
	rounds := st.sel.HealthRounds() - rounds0
	plog.mu.Lock()
	probes, took := len(plog.took), plog.took
	failedNodes := len(plog.failed)
	plog.mu.Unlock()
	changes := hostChanges(reg) - changes0
	if err := st.stop(); err != nil {
		return wrap("master", err)
	}
	ours := ticksToCPU(cpu1-cpu0, t1.Sub(t0))

	b.step("the same connects by a bare loop for %v", window)
	bare, err := bareProbes(ctx, target, len(hosts), interval, sc.HealthTimeout, window)
	if err != nil {
		return err
	}

	wall := t1.Sub(t0).Seconds()
	r.metric("hosts probed", float64(len(hosts)), "nodes")
	r.metric("probe interval of each host (--health-interval, stretched by --health-max-rate)", interval.Seconds(), "s")
	r.metric("master: probe rounds in the window", float64(rounds), "rounds")
	r.metric("master: probes per second", float64(probes)/wall, "probes/s")
	r.metric("master: CPU while probing (cores)", ours, "cores")
	r.metric("master: CPU per probe", ours*wall/float64(max(probes, 1))*1e6, "µs")
	r.seconds("master: probe duration p50", took.pct(0.5))
	r.seconds("master: probe duration p99", took.pct(0.99))
	r.seconds("master: probe duration max", took.pct(1))
	r.metric("master: nodes with a failed probe", float64(failedNodes), "nodes")
	r.metric("master: hosts changed (false failovers)", changes, "changes")
	r.metric("bare loop: connects per second", float64(bare.connects)/bare.wall.Seconds(), "connects/s")
	r.metric("bare loop: CPU (cores)", bare.cpu, "cores")
	r.metric("bare loop: CPU per connect", bare.cpu*bare.wall.Seconds()/float64(max(bare.connects, 1))*1e6, "µs")
	perOurs := ours * wall / float64(max(probes, 1))
	perBare := bare.cpu * bare.wall.Seconds() / float64(max(bare.connects, 1))
	if ticks := min(cpu1-cpu0, bare.ticks); ticks < minTicks {
		r.note("CPU per probe is not compared: a side used %d CPU ticks in the window, fewer than the %d a ratio needs (a longer -health-window or more hosts)", ticks, minTicks)
	} else {
		rt := ratio(perOurs, perBare)
		r.check("health: CPU per probe vs a bare connect loop", rt, "×", "<=", 2,
			fmt.Sprintf("%.1f µs vs %.1f µs = %s", perOurs*1e6, perBare*1e6, times(rt)), "≤ 2×")
	}
	r.check("health: false failovers while every host answers", changes, "changes", "==", 0,
		fmt.Sprintf("%.0f host changes, %d nodes with a failed probe", changes, failedNodes), "0")
	r.note("every probe connects to a refused port on 127.0.0.1 (mode %s counts the reset as an answer, as a host's closed discard port is); a real probe also crosses the network, which costs the master nothing more", sc.HealthCheckMode)
	return nil
}

// hostChanges sums ovn_egress_host_changes_total over its labels.
func hostChanges(reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "ovn_egress_host_changes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// bareRun is what the bare connect loop did.
type bareRun struct {
	connects int
	ticks    int64
	cpu      float64 // cores
	wall     time.Duration
}

// bareProbes makes n connects to target every interval, spread evenly over
// it as the master spreads its probes (each bounded by timeout), for
// window: the connects a health round needs, with nothing else.
func bareProbes(ctx context.Context, target string, n int, interval, timeout, window time.Duration) (bareRun, error) {
	var res bareRun
	var d net.Dialer
	var mu sync.Mutex
	var failures int
	cpu0, t0 := cpuTicks(os.Getpid()), time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	for time.Since(t0) < window && ctx.Err() == nil {
		round := time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sleepCtx(ctx, time.Until(round.Add(interval*time.Duration(i)/time.Duration(n))))
				cctx, cancel := context.WithTimeout(ctx, timeout)
				c, err := d.DialContext(cctx, "tcp", target)
				cancel()
				mu.Lock()
				res.connects++
				if err == nil {
					c.Close()
				} else if !errors.Is(err, syscall.ECONNREFUSED) {
					failures++
				}
				mu.Unlock()
			}()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	res.wall = time.Since(t0)
	res.ticks = cpuTicks(os.Getpid()) - cpu0
	res.cpu = ticksToCPU(res.ticks, res.wall)
	if failures > 0 {
		return res, fmt.Errorf("bare loop: %d of %d connects neither accepted nor refused", failures, res.connects)
	}
	return res, ctx.Err()
}

// minTicks is the fewest CPU ticks (10 ms each) a side of the CPU ratio
// must use for the ratio to mean anything.
const minTicks = 20

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat.
const clockTicks = 100

// ticksToCPU is CPU ticks over a wall time in cores.
func ticksToCPU(ticks int64, wall time.Duration) float64 {
	return float64(ticks) / clockTicks / wall.Seconds()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
