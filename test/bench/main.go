// Command bench measures ovn-egress at scale against the best possible on
// the same machine in the same run (issue 8, DESIGN §6): the real NB, SB and
// ovn-northd from the Debian packages, a real kube-apiserver where the
// scenario is about the API server, and informers fed by client-go's fake
// clientsets where the API server would only be the bottleneck.
//
//	go run ./test/bench [-quick] [-services N -endpoints M -nodes K] [-scenarios a,b] [-out DIR]
//
// It prints every number and a table of every target (MISSED where one is
// missed) and writes one JSON file per scenario to DIR/<date>-<scenario>.json.
// The exit status is non-zero only when a scenario could not run; a missed
// target is reported, never asserted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	size      size
	scenarios []string
	out       string
	churn     int
	peerChurn int
	failovers int
	hostMoves time.Duration
	// healthWindow is how long the health scenario probes (each side);
	// healthMaxRate is the master's --health-max-rate there.
	healthWindow  time.Duration
	healthMaxRate int
	// eip is the EgressIP scenario's size.
	eip      eipSize
	sustain  time.Duration
	rate     float64
	kubeQPS  float64
	logLevel string
	profile  string
	// heapProfile is written where the zone scenario measures its agent's
	// live heap.
	heapProfile string
}

// allScenarios in the order they run (host selection first: it leaves the
// API server's EgressServices with hosts the later scenarios reuse).
func allScenarios() []string {
	return []string{"selection", "converge", "steady", "churn", "failover", "health", "zone", "egressip", "gateway", "natshape", "node"}
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var scen string
	fs.IntVar(&o.size.Services, "services", 10000, "EgressServices (N)")
	fs.IntVar(&o.size.Endpoints, "endpoints", 4, "endpoints per service (M)")
	fs.IntVar(&o.size.Nodes, "nodes", 50, "nodes (K); every node hosts N/K services")
	quick := fs.Bool("quick", false, "small size: 1000 × 4 × 10, fewer churn rounds (~8 min on 2 cores)")
	named := fs.String("size", "", "a named size instead of -services/-endpoints/-nodes: "+mixEnvelope+
		" (Kubernetes' scalability envelope: 10,000 services, 150,000 endpoints, 5,000 nodes; 3 peer-shape changes;"+
		" -nodes may lower the node count, keeping the services and endpoints)")
	fs.StringVar(&scen, "scenarios", "all", "comma-separated: "+strings.Join(allScenarios(), ","))
	fs.StringVar(&o.out, "out", "bench/results", "directory for the JSON results")
	fs.IntVar(&o.churn, "churn", 100, "endpoint changes measured one at a time (R)")
	fs.IntVar(&o.peerChurn, "peer-churn", 20, "endpoint changes measured on the peer shape (each costs northd a full recompute)")
	fs.DurationVar(&o.hostMoves, "host-moves-bound", 0, "failover: how long translation waits for host selection's status writes (0: the master's default; 1ns: it does not wait, as before the gate)")
	fs.IntVar(&o.failovers, "failover-rounds", 10, "hosts failed one after the other in the failover scenario (at most nodes-1)")
	fs.DurationVar(&o.healthWindow, "health-window", 20*time.Second, "health checks: how long the master and the bare loop each probe")
	fs.IntVar(&o.healthMaxRate, "health-max-rate", selection.DefaultMaxRate, "health checks: the master's --health-max-rate (0: no cap)")
	fs.IntVar(&o.eip.Pods, "eip-pods", 10000, "egressip: pods selected by EgressIPs")
	fs.IntVar(&o.eip.Objects, "eips", 100, "egressip: EgressIP objects (one IP on one egress node each)")
	fs.DurationVar(&o.sustain, "sustain", 10*time.Second, "gateway backend: length of the sustained churn")
	fs.Float64Var(&o.rate, "rate", 20, "gateway backend: endpoint changes per second during the sustained churn")
	fs.Float64Var(&o.kubeQPS, "kube-qps", -1, "client-side QPS towards the API server for the master and the bare client alike (-1: unlimited)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level of the in-process controllers")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the bench process (in-process masters included) to this file")
	fs.StringVar(&o.heapProfile, "heapprofile", "", "write a heap profile to this file where the zone scenario measures the live heap its agent holds")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		quickInt := func(name string, v *int, q int) {
			if !set[name] {
				*v = q
			}
		}
		quickInt("services", &o.size.Services, 1000)
		quickInt("nodes", &o.size.Nodes, 10)
		quickInt("churn", &o.churn, 30)
		quickInt("peer-churn", &o.peerChurn, 6)
		quickInt("failover-rounds", &o.failovers, 3)
		quickInt("eip-pods", &o.eip.Pods, 1000)
		quickInt("eips", &o.eip.Objects, 10)
		if !set["sustain"] {
			o.sustain = 5 * time.Second
		}
		if !set["health-window"] {
			o.healthWindow = 5 * time.Second
		}
	}
	switch *named {
	case "":
	case mixEnvelope:
		if set["services"] || set["endpoints"] || *quick {
			return o, fmt.Errorf("-size=%s sets the size: no -services, -endpoints or -quick with it (-nodes lowers its node count)", *named)
		}
		nodes := o.size.Nodes
		o.size = envelopeSize
		if set["nodes"] {
			// The part of the envelope one machine's central NB holds: the
			// same services and endpoints on fewer nodes (docs/performance.md §7).
			o.size.Nodes = nodes
		}
		if !set["peer-churn"] {
			o.peerChurn = 3 // each costs northd a full recompute of 150,000 policies
		}
	default:
		return o, fmt.Errorf("unknown -size %q (want %s)", *named, mixEnvelope)
	}
	if scen == "all" {
		o.scenarios = allScenarios()
	} else {
		for _, s := range strings.Split(scen, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(allScenarios(), s) {
				return o, fmt.Errorf("unknown scenario %q (want %s)", s, strings.Join(allScenarios(), ","))
			}
			o.scenarios = append(o.scenarios, s)
		}
	}
	if o.churn < 3 || o.peerChurn < 3 {
		return o, fmt.Errorf("-churn and -peer-churn must be at least 3 (one add, move and remove)")
	}
	if o.rate <= 0 || o.sustain <= 0 || o.healthWindow <= 0 {
		return o, fmt.Errorf("-rate, -sustain and -health-window must be positive")
	}
	return o, nil
}

// bench is one run: the world, the options, and the environments shared
// between scenarios (the API server, the product binary).
type bench struct {
	opts options
	w    *world
	log  *logrus.Entry
	out  io.Writer
	api  *apiEnv
	tmp  string
	bin  string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	w, err := newWorld(o.size)
	if err != nil {
		return err
	}
	lvl, err := logrus.ParseLevel(o.logLevel)
	if err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	l := logrus.New()
	l.SetOutput(stderr)
	l.SetLevel(lvl)
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: stamp})
	tmp, err := os.MkdirTemp("", "oeb-run-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	w.cacheDir = tmp
	b := &bench{opts: o, w: w, log: l.WithField("component", "bench"), out: stdout, tmp: tmp}
	defer b.close()
	if w.natMatch, err = b.detectNATMatch(ctx); err != nil {
		return err
	}
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	stamp := time.Now().Format("2006-01-02-1504")
	if v := testenv.OVNVersion(); v != testenv.OVN23 {
		stamp += "-ovn" + v // results of both OVNs side by side
	}
	fmt.Fprintf(stdout, "ovn-egress bench: %s on OVN %s, scenarios %s\n", o.size, testenv.OVNVersion(), strings.Join(o.scenarios, ","))
	var results []*result
	var failed []string
	for _, name := range o.scenarios {
		r := newResult(name, o.size)
		start := time.Now()
		fmt.Fprintf(stdout, "\n-- %s ...\n", name)
		if err := b.scenario(name)(ctx, r); err != nil {
			r.Error = err.Error()
			failed = append(failed, name)
		}
		r.Seconds = round(time.Since(start).Seconds(), 2)
		r.LoadAfter = loadAvg()
		r.Machine = machineFacts(b.kubeAPIServer())
		path, err := r.write(o.out, stamp)
		if err != nil {
			return err
		}
		printMetrics(stdout, r)
		if r.Error != "" {
			fmt.Fprintf(stdout, "  ERROR: %s\n", r.Error)
		}
		fmt.Fprintf(stdout, "  → %s\n", path)
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Fprintln(stdout)
	printTable(stdout, results)
	if o.size != defaultSize && o.size.Mix != mixEnvelope {
		fmt.Fprintf(stdout, "(DESIGN §6 states the targets for 10000 × 4 × 50; at %s they are indicative: the peer shape's costs grow with its row count)\n", o.size)
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenario(s) failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// step prints a progress line (phases can take minutes at full size).
// stamp is the time format of the debug log: milliseconds, as a failover's
// phases are tens of them apart.
const stamp = "15:04:05.000"

func (b *bench) step(format string, args ...any) {
	fmt.Fprintf(b.out, "   %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) scenario(name string) func(context.Context, *result) error {
	return map[string]func(context.Context, *result) error{
		"selection": b.runSelection,
		"converge":  b.runConverge,
		"steady":    b.runSteady,
		"churn":     b.runChurn,
		"failover":  b.runFailover,
		"health":    b.runHealth,
		"zone":      b.runZone,
		"egressip":  b.runEgressIP,
		"gateway":   b.runGateway,
		"natshape":  b.runNATShape,
		"node":      b.runNodeAgent,
	}[name]
}

func (b *bench) close() {
	if b.api != nil {
		b.api.stop()
	}
}

// within bounds a phase so that a hang fails the scenario instead of the run.
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// wrap names the phase an error happened in.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
