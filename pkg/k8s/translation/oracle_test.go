package translation_test

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestTranslationOracle drives the translation controller — its
// informers on client-go's fake clientsets, a real NB with the
// ovn-kubernetes topology — through seeded random sequences of changes:
// EgressServices created, deleted and moved between hosts (and to none, and
// to a node that does not exist), endpoints, ingress IPs, nodes renumbered,
// deleted and created again, agents' reports (current, stale, missing),
// rows of ovn-egress deleted or changed behind its back, rows of others
// beside them, gateway routers' join addresses changed, resyncs and
// restarts. After each burst, once quiet, NB must hold exactly the rows
// that translate.Translate computes from scratch from the objects as the
// clientsets hold them (read with the BuildPlan of `ovn-egress verify`:
// nothing to change), and every row of others must still be there. The
// whole translation is the oracle of every incremental path the controller
// takes (Memo, kept and unlisted services, dirt, the service cache, the
// wanted sets).
//
// make test runs seeds 1–4; OVN_EGRESS_ORACLE=5m runs random seeds for five
// minutes (make oracle), OVN_EGRESS_ORACLE_SEEDS=N seeds 1–N, and
// OVN_EGRESS_ORACLE_SEED=N replays seed N.
func TestTranslationOracle(t *testing.T) {
	steps := 40
	seeds := []uint64{1, 2, 3, 4}
	var until time.Time
	if d, err := time.ParseDuration(os.Getenv("OVN_EGRESS_ORACLE")); err == nil {
		until, steps = time.Now().Add(d), 150
		seeds = nil
	}
	if s := os.Getenv("OVN_EGRESS_ORACLE_SEEDS"); s != "" {
		var n uint64
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatalf("OVN_EGRESS_ORACLE_SEEDS=%q: %v", s, err)
		}
		seeds, until = nil, time.Time{}
		for seed := range n {
			seeds = append(seeds, seed+1)
		}
	}
	if s := os.Getenv("OVN_EGRESS_ORACLE_SEED"); s != "" {
		var seed uint64
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("OVN_EGRESS_ORACLE_SEED=%q: %v", s, err)
		}
		seeds, until = []uint64{seed}, time.Time{}
	}
	for i := 0; i < len(seeds) || time.Now().Before(until); i++ {
		seed := uint64(time.Now().UnixNano())
		if i < len(seeds) {
			seed = seeds[i]
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runOracle(t, seed, steps) })
		if t.Failed() {
			return
		}
	}
}

// runOracle is one seed's sequence. The seed also chooses the shape of the
// cluster: 3 to 6 nodes (6 nodes make the oracle's plan read every table
// in place, ovn.ownedByKey's path for 8 keys and more, while the
// controller's syncs of a few keys use the name index), IPv4 or dual
// stack, the host or the ovn backend, and agents assumed ready or their
// reports read.
func runOracle(t *testing.T, seed uint64, steps int) {
	rnd := rand.New(rand.NewPCG(seed, seed>>1|1))
	families := []ipfamily.Family{ipfamily.V4}
	if rnd.IntN(2) == 0 {
		families = append(families, ipfamily.V6)
	}
	topo := testenv.DefaultTopology(3+rnd.IntN(4), families...)
	cfg := translate.DefaultConfig()
	cfg.ClusterSubnets, cfg.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
	cfg.Backend = []translate.Backend{translate.BackendHost, translate.BackendOVN}[rnd.IntN(2)]
	cfg.AssumeAgentsReady = rnd.IntN(2) == 0
	o := testenv.NewOVN(t, testenv.OVNOptions{NoNorthd: true}) // rows read back, no flows: no northd
	o.MustNBCtl(t, topo.NBCtlCommands()...)
	w := &world{t: t, rnd: rnd, topo: topo, o: o, cfg: cfg,
		kube: kubefake.NewClientset(), egress: egressfake.NewSimpleClientset()}
	t.Logf("seed %d: %d nodes, %v, %s backend, agents assumed ready: %v", seed, len(topo.Nodes), families, cfg.Backend, cfg.AssumeAgentsReady)
	for _, n := range topo.Nodes {
		_, err := w.kube.CoreV1().Nodes().Create(context.Background(), topo.NodeObject(n), metav1.CreateOptions{})
		w.must("create node", err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("seed %d, the steps (replay: OVN_EGRESS_ORACLE_SEED=%d):\n%s", seed, seed, strings.Join(w.log, "\n"))
		}
	}()
	nb := w.nbClient()
	defer nb.Close()
	foreign := w.foreignRows()
	run := w.start()
	defer func() { run.stop(t) }()
	for i := 0; i < steps && !t.Failed(); i++ {
		for range 1 + rnd.IntN(4) {
			switch r := rnd.IntN(100); {
			case r < 80:
				w.step()
			case r < 88:
				w.drift()
			case r < 91 && cfg.Backend == translate.BackendOVN:
				w.rejoin(w.pick(len(topo.Nodes)))
			case r < 95:
				w.logf("resync")
				run.c.EnqueueAll()
			default:
				w.logf("restart")
				run.stop(t)
				run = w.start()
			}
		}
		w.converged(nb, run, i)
		for _, uuid := range foreign {
			if _, err := o.NBCtl("get", "Logical_Router_Policy", uuid, "priority"); err != nil {
				t.Fatalf("step %d: the foreign policy %s is gone: %v", i, uuid, err)
			}
		}
	}
}

// running is one controller instance.
type running struct {
	c      *translation.Controller
	nb     client.Client
	cancel func()
	done   chan error
}

func (r *running) stop(t testing.TB) {
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("the controller's Run: %v", err)
	}
	r.nb.Close()
}

// start builds a controller as the master does (informer factories of
// package informer, the report informer) and runs it.
func (w *world) start() *running {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nb := w.nbClient()
	kubeInf, egInf := informer.Kube(w.kube), informer.Egress(w.egress)
	repInf := informer.Reports(w.kube, reportNS)
	log := logrus.New()
	log.SetOutput(testWriter{w.t})
	log.SetLevel(logrus.WarnLevel)
	if os.Getenv("OVN_EGRESS_ORACLE_DEBUG") != "" {
		log.SetLevel(logrus.DebugLevel)
	}
	c, err := translation.New(translation.Config{Translate: w.cfg, Reports: repInf.Core().V1().ConfigMaps()}, log.WithField("seed", "oracle"),
		nb, kubeInf, egInf, &record.FakeRecorder{})
	if err != nil {
		cancel()
		w.t.Fatal(err)
	}
	kubeInf.Start(ctx.Done())
	egInf.Start(ctx.Done())
	repInf.Start(ctx.Done())
	r := &running{c: c, nb: nb, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	// A restart is one once the new controller has read the world (Run
	// fails when stopped before).
	for deadline := time.Now().Add(30 * time.Second); !c.Synced(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.t.Fatal("the controller's informers did not sync in 30 s")
		}
	}
	return r
}

type testWriter struct{ t testing.TB }

func (tw testWriter) Write(p []byte) (int, error) {
	tw.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (w *world) nbClient() client.Client {
	w.t.Helper()
	nb, err := ovn.NewNBClient(context.Background(), ovn.ClientConfig{Addresses: []string{w.o.NBAddress()}}, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return nb
}

// converged waits until the controller is idle and NB holds exactly what
// the whole translation of the world gives; it fails the test with what
// differs when that does not come within a bound far above a sync's time.
func (w *world) converged(nb client.Client, run *running, step int) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var diff string
	for time.Now().Before(deadline) {
		if run.c.Synced() && run.c.Idle() {
			if diff = w.difference(nb); diff == "" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("step %d: NB is not the translation of the world 30 s after the last change:\n%s", step, diff)
}

// difference returns what `verify` would change: the plan from the NB as
// it is to the rows translate.Translate gives for the world from scratch
// (every key of the world and every key NB has owned rows under).
func (w *world) difference(nb client.Client) string {
	ctx := context.Background()
	objs := w.objects()
	in := translate.InputFromObjects(w.cfg, objs)
	keys := in.AllKeys()
	owned, err := ovn.OwnedKeys(ctx, nb)
	if err != nil {
		return err.Error()
	}
	for _, k := range owned {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	names := make([]string, 0, len(objs.Nodes))
	for _, n := range objs.Nodes {
		names = append(names, n.Name)
	}
	if err := ovn.Facts(ctx, nb, &in, keys, names); err != nil {
		return err.Error()
	}
	d := egressservice.Translate(in)
	plan, err := ovn.BuildPlan(ctx, nb, keys, d)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, c := range plan.Changes() {
		out = append(out, c.String())
	}
	if len(out) == 0 {
		return ""
	}
	// The address sets that differ, whole: what a reader needs first.
	for _, k := range keys {
		if d.Rows[k] == nil {
			continue
		}
		for _, as := range d.Rows[k].AddressSets {
			if have := in.Current[as.Name]; !slices.Equal(have, as.Addresses) {
				out = append(out, fmt.Sprintf("  %s: NB %v, want %v", as.ExternalIDs[translate.KeyID], have, as.Addresses))
			}
		}
	}
	return strings.Join(out, "\n")
}

// foreignRows writes rows of another controller beside ovn-egress's, at
// its priority: a reroute of a pod address and an allow policy.
func (w *world) foreignRows() []string {
	var out []string
	for _, p := range []struct{ prio, match, action string }{
		{"101", "ip4.src == 10.244.1.99", "reroute"},
		{"102", "ip4.dst == 192.0.2.0/24", "allow"},
	} {
		args := []string{"--", "--id=@p", "create", "Logical_Router_Policy", "priority=" + p.prio, "match=" + `"` + p.match + `"`,
			"action=" + p.action, `external_ids:k8s.ovn.org/owner-controller="someone-else"`}
		if p.action == "reroute" {
			args = append(args, `nexthops="100.64.0.99"`)
		}
		args = append(args, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
		out = append(out, strings.TrimSpace(w.o.MustNBCtl(w.t, args...)))
	}
	return out
}

// drift changes one of ovn-egress's rows behind its back: deletes a
// policy, empties or widens an address set, or changes a NAT's address.
func (w *world) drift() {
	// The rows in the order of their ids, not of their random UUIDs: a
	// seed replays the same drift.
	owned := func(table string) []string {
		out, err := w.o.NBCtl("--format=csv", "--data=bare", "--no-headings", "--columns=external_ids,_uuid", "find", table,
			"external_ids:"+translate.KeyOwnerController+"="+translate.OwnerController)
		if err != nil {
			w.t.Fatalf("find %s: %v", table, err)
		}
		lines := strings.FieldsFunc(out, func(r rune) bool { return r == '\n' })
		slices.Sort(lines)
		uuids := make([]string, 0, len(lines))
		for _, l := range lines {
			uuids = append(uuids, l[strings.LastIndexByte(l, ',')+1:])
		}
		return uuids
	}
	// The controller may delete the row between the find and the edit (the
	// burst goes on while it works): that drift is lost, not a failure.
	edit := func(args ...string) {
		if out, err := w.o.NBCtl(args...); err != nil {
			if !strings.Contains(err.Error()+out, "no row") {
				w.t.Fatalf("ovn-nbctl %v: %v", args, err)
			}
			w.logf("  (the row went first)")
		}
	}
	switch r := w.pick(4); {
	case r == 0:
		if ps := owned("Logical_Router_Policy"); len(ps) > 0 {
			u := ps[w.pick(len(ps))]
			w.logf("drift: delete policy %s", u)
			edit("remove", "Logical_Router", "ovn_cluster_router", "policies", u)
		}
	case r == 1:
		if as := owned("Address_Set"); len(as) > 0 {
			u := as[w.pick(len(as))]
			w.logf("drift: empty address set %s", u)
			edit("clear", "Address_Set", u, "addresses")
		}
	case r == 2:
		if as := owned("Address_Set"); len(as) > 0 {
			u := as[w.pick(len(as))]
			w.logf("drift: add 10.244.77.77 to address set %s", u)
			edit("add", "Address_Set", u, "addresses", `"10.244.77.77"`)
		}
	default:
		if ns := owned("NAT"); len(ns) > 0 {
			u := ns[w.pick(len(ns))]
			w.logf("drift: NAT %s external_ip → 172.18.99.99", u)
			edit("set", "NAT", u, `external_ip="172.18.99.99"`)
		}
	}
}

// rejoin gives GR_<node i> a new join address (the ovn backend reroutes
// to it, read from NB).
func (w *world) rejoin(i int) {
	n := w.topo.Nodes[i]
	var nets []string
	for _, f := range w.topo.Families {
		k := 50 + w.pick(100)
		if f == ipfamily.V4 {
			nets = append(nets, fmt.Sprintf(`"100.64.1.%d/16"`, k))
		} else {
			nets = append(nets, fmt.Sprintf(`"fd98::1:%x/64"`, k))
		}
	}
	w.logf("rejoin GR_%s: %v", n.Name, nets)
	w.o.MustNBCtl(w.t, "set", "Logical_Router_Port", "rtoj-GR_"+n.Name, "networks=["+strings.Join(nets, ",")+"]")
}
