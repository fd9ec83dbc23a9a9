//go:build chaos

package local

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
)

// `make chaos` (build tag chaos): a bounded soak of the local real-packet
// cluster. A driver changes the cluster all the time while a seeded
// schedule injects faults, one at a time and overlapping; checkers that do
// not ask the product watch throughout and after the faults are healed.
var (
	chaosDuration = flag.Duration("chaos.duration", 3*time.Minute, "how long the driver and the faults run")
	chaosSeed     = flag.Int64("chaos.seed", 0, "the schedule's seed (0: from the clock; the summary prints it)")
	chaosOut      = flag.String("chaos.out", "", "write the summary as JSON to this file")
)

// chaosEvent is one step of the schedule: a driver action, or a fault's
// start or end.
type chaosEvent struct {
	at     time.Duration
	kind   string
	target string
	end    bool // a fault's end (heal)
}

// Faults and driver actions, by name.
var (
	chaosFaults  = []string{"nb-restart", "master-kill", "agent-kill", "agent-freeze", "node-notready", "apiserver-restart", "etcd-restart"}
	chaosActions = []string{"relabel", "move-endpoints", "recreate", "selector"}
)

// chaosSchedule is the seeded schedule: a driver action every 0.5–1.5 s;
// a fault every 3–7 s, lasting 1–5 s (so faults overlap).
func chaosSchedule(rng *rand.Rand, d time.Duration) []chaosEvent {
	var ev []chaosEvent
	nodes := []string{"node1", "node2", "node3"}
	for at := time.Duration(0); at < d; at += time.Duration(500+rng.IntN(1000)) * time.Millisecond {
		ev = append(ev, chaosEvent{at: at, kind: chaosActions[rng.IntN(len(chaosActions))], target: chaosServices[rng.IntN(len(chaosServices))]})
	}
	for at := 2 * time.Second; at < d; at += time.Duration(3000+rng.IntN(4000)) * time.Millisecond {
		kind := chaosFaults[rng.IntN(len(chaosFaults))]
		target := nodes[rng.IntN(len(nodes))]
		ev = append(ev, chaosEvent{at: at, kind: kind, target: target},
			chaosEvent{at: at + time.Duration(1000+rng.IntN(4000))*time.Millisecond, kind: kind, target: target, end: true})
	}
	slices.SortStableFunc(ev, func(a, b chaosEvent) int { return int(a.at - b.at) })
	return ev
}

// chaosServices are the soak's services; each has its own pods.
var chaosServices = []string{"web", "api", "db"}

// chaosSummary is what a run reports.
type chaosSummary struct {
	Seed        int64            `json:"seed"`
	Duration    string           `json:"duration"`
	Actions     map[string]int   `json:"actions"`
	Faults      map[string]int   `json:"faults"`
	Skipped     int              `json:"faults_skipped"`
	Probes      int              `json:"probes_answered"`
	Unanswered  int              `json:"probes_unanswered"`
	Sources     map[string]int   `json:"sources"`
	Violations  []string         `json:"violations"`
	Converged   string           `json:"converged_after_heal"`
	Restarted   map[string]int   `json:"restarted_by_supervisor"` // processes that exited on their own, started again as the kubelet would
	LeakGuard   map[string][]int `json:"leak_guard_drops"`        // not SNATed, conntrack-invalid, withdrawn
	CaptureLeak []string         `json:"captured_pod_sources"`
}

func TestChaos(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("chaos seed %d, %v (repeat with -chaos.seed=%d)", seed, *chaosDuration, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	c := newCluster(t, options{backend: "host", families: []ipfamily.Family{ipfamily.V4, ipfamily.V6}, masters: 2})
	pools := map[string][]*pod{
		"web": {c.addPod("w1", "node1", 5), c.addPod("w2", "node2", 6)},
		"api": {c.addPod("a1", "node3", 7), c.addPod("a2", "node1", 8)},
		"db":  {c.addPod("d1", "node2", 9)},
	}
	lbs := map[string][]netip.Addr{}
	for i, name := range chaosServices {
		lbs[name] = c.service(name, i, pools[name]...)
	}
	for _, n := range []string{"node2", "node3"} {
		c.label(n, "egress", "a")
	}
	selector := egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "a"}}}
	for _, name := range chaosServices {
		c.egressService(name, selector)
		c.host(name, func(h string) bool { return h != "" })
	}

	sum := chaosSummary{Seed: seed, Duration: chaosDuration.String(), Actions: map[string]int{}, Faults: map[string]int{}, Sources: map[string]int{}, Restarted: map[string]int{}}
	foreign := c.snapshotForeign()
	pr := c.startProbers(pools, lbs)

	// The schedule runs on the test's goroutine (the harness's helpers
	// fail the test on error).
	st := &chaosState{c: c, rng: rng, pools: pools, endpoints: map[string][]*pod{}, frozen: map[string]bool{}, active: map[string]bool{}, restarted: sum.Restarted}
	for name, p := range pools {
		st.endpoints[name] = p
	}
	start := time.Now()
	var deferred []chaosEvent
	for _, ev := range chaosSchedule(rng, *chaosDuration) {
		time.Sleep(time.Until(start.Add(ev.at)))
		c.dataplaneAlive()
		st.supervise()
		switch {
		case st.apiDown(ev.kind) && slices.Contains(chaosActions, ev.kind):
			sum.Actions["skipped, API server down"]++
		case st.apiDown(ev.kind) && ev.end && ev.kind == "node-notready":
			deferred = append(deferred, ev) // healed once the API server is back
		case slices.Contains(chaosActions, ev.kind):
			st.act(ev)
			sum.Actions[ev.kind]++
		case ev.end:
			st.heal(ev)
			if !st.apiDown("") {
				for _, d := range deferred {
					st.heal(d)
				}
				deferred = nil
			}
		case st.inject(ev):
			sum.Faults[ev.kind]++
		default:
			sum.Skipped++
		}
	}
	st.healAll()
	st.supervise()
	if os.Getenv("OVN_EGRESS_CHAOS_HOLD") != "" {
		// A developer inspecting a failed convergence: keep everything up.
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("holding the cluster for inspection (%s)", os.Getenv("OVN_EGRESS_CHAOS_HOLD"))
				d, _ := time.ParseDuration(os.Getenv("OVN_EGRESS_CHAOS_HOLD"))
				time.Sleep(d)
			}
		})
	}
	healed := time.Now()
	t.Logf("faults healed after %v; checking convergence", time.Since(start).Round(time.Second))
	st.converged(lbs)
	c.dataplaneAlive()
	c.foreignUntouched(foreign)
	sum.Converged = time.Since(healed).Round(time.Millisecond).String()
	pr.stop()
	st.nothingLeft()
	sum.Probes, sum.Unanswered, sum.Sources, sum.Violations = pr.results()
	if len(sum.Violations) > 0 {
		t.Errorf("%d probe answers with a source that is neither the pod's LB IP nor its node's address; first: %s", len(sum.Violations), sum.Violations[0])
	}
	sum.LeakGuard = map[string][]int{}
	for node, d := range c.leakGuardDrops() {
		sum.LeakGuard[node] = []int{int(d.unsnatted), int(d.invalid), int(d.withdrawn)}
	}
	for src := range c.capture.Sources() {
		for _, s := range c.topo.ClusterSubnets {
			if s.Contains(src) {
				sum.CaptureLeak = append(sum.CaptureLeak, src.String())
			}
		}
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	t.Logf("chaos summary:\n%s", b)
	if *chaosOut != "" {
		if err := os.WriteFile(*chaosOut, append(b, '\n'), 0o644); err != nil {
			t.Error(err)
		}
	}
	// assertNoLeak (a cleanup of the cluster) fails the run on any pod
	// address the outside captured or any unSNATed drop of the leak guard.
}

// dataplaneAlive ends the run when the test's own dataplane died: its
// verdict would say nothing about ovn-egress. Seen with Debian 12's OVS
// 3.1 under the soak: ovs-vswitchd's userspace conntrack asserts
// (conntrack.c: "conn->conn_type == CT_CONN_TYPE_DEFAULT" in
// conn_update_state) and exits; OVS 3.5 (OVN_VERSION=25.03) ran the same
// seed through.
func (c *cluster) dataplaneAlive() {
	c.t.Helper()
	if err := c.dp.Died(); err != nil {
		c.t.Fatalf("the test's dataplane died, the soak's verdict is void (OVN %s; OVS 3.1's userspace conntrack is known to assert here: run with OVN_VERSION=25.03): %v",
			testenv.OVNVersion(), err)
	}
}

// chaosState is what the schedule changed and has not healed yet.
type chaosState struct {
	c         *cluster
	rng       *rand.Rand
	pools     map[string][]*pod
	endpoints map[string][]*pod
	frozen    map[string]bool
	active    map[string]bool // "kind/target" of running faults
	nbDown    bool
	restarted map[string]int
}

// supervise plays the kubelet: a master replica or an agent that exited
// on its own (a master that lost its Lease while the API server was away
// exits, so a Deployment restarts it) is started again; two master
// replicas run except while a master-kill fault holds one down.
func (s *chaosState) supervise() {
	c := s.c
	live, down := 0, 0
	for _, m := range c.masters {
		if m.Exited() == nil {
			live++
		}
	}
	for k := range s.active {
		if strings.HasPrefix(k, "master-kill/") {
			down++
		}
	}
	for ; live < 2-down; live++ {
		c.startMaster()
		s.restarted["master"]++
	}
	for _, n := range c.topo.Nodes {
		if !s.active["agent-kill/"+n.Name] && c.agents[n.Name].Exited() != nil {
			c.t.Logf("agent %s exited on its own: %v", n.Name, c.agents[n.Name].Exited())
			c.agents[n.Name] = c.startAgent(n.Name)
			s.restarted["agent"]++
		}
	}
}

// act runs one driver action on a service.
func (s *chaosState) act(ev chaosEvent) {
	c := s.c
	switch ev.kind {
	case "relabel": // node2 or node3 gains or loses egress=a
		n := []string{"node2", "node3"}[s.rng.IntN(2)]
		v := any("a")
		if s.rng.IntN(2) == 0 {
			v = nil
		}
		c.patchNode(n, map[string]any{"egress": v})
	case "move-endpoints": // a non-empty subset of the service's pods
		pool := s.pools[ev.target]
		var eps []*pod
		for len(eps) == 0 {
			eps = eps[:0]
			for _, p := range pool {
				if s.rng.IntN(2) == 0 {
					eps = append(eps, p)
				}
			}
		}
		var addrs []string
		for _, p := range eps {
			for _, ip := range p.ips {
				addrs = append(addrs, ip.String()+"@"+p.node)
			}
		}
		kube.SetEndpoints(c.t, c.ns, ev.target, addrs...)
		s.endpoints[ev.target] = eps
	case "recreate": // the EgressService deleted and created again
		if err := kube.Egress.K8sV1().EgressServices(c.ns).Delete(context.Background(), ev.target, metav1.DeleteOptions{}); err == nil {
			c.egressService(ev.target, egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "a"}}})
		}
	case "selector": // egress=a, or every node
		sel := map[string]any{"egress": "a"}
		if s.rng.IntN(3) == 0 {
			sel = map[string]any{"egress": nil}
		}
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodeSelector": map[string]any{"matchLabels": sel}}})
		if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Patch(context.Background(), ev.target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			c.t.Logf("selector of %s: %v", ev.target, err) // a recreate may be on its way
		}
	}
}

// inject starts a fault; false when one of its kind already holds the target.
func (s *chaosState) inject(ev chaosEvent) bool {
	c, key := s.c, ev.kind+"/"+ev.target
	if s.active[key] || (ev.kind == "nb-restart" && s.nbDown) || s.apiDown(ev.kind) {
		return false
	}
	switch ev.kind {
	case "nb-restart":
		c.ovn.KillNB()
		s.nbDown = true
	case "master-kill":
		i := c.liveLeader(5 * time.Second)
		if i < 0 {
			return false // nobody leads yet (a restarted API server, replicas starting)
		}
		c.masters[i].Kill() // the standby takes the Lease
	case "agent-kill":
		if s.frozen[ev.target] {
			return false
		}
		c.agents[ev.target].Kill()
	case "agent-freeze": // alive to the kernel (its health listener still accepts), doing nothing
		if s.active["agent-kill/"+ev.target] {
			return false
		}
		_ = syscall.Kill(c.agents[ev.target].Pid(), syscall.SIGSTOP)
		s.frozen[ev.target] = true
	case "node-notready":
		c.setReady(ev.target, false)
	case "apiserver-restart":
		kube.KillAPIServer()
	case "etcd-restart":
		kube.KillEtcd()
	}
	s.active[key] = true
	c.t.Logf("%s fault %s on %s", time.Now().Format("15:04:05.000"), ev.kind, ev.target)
	return true
}

// liveLeader is the index of the running master replica that holds the
// Lease, or -1 when none does within wait.
func (c *cluster) liveLeader(wait time.Duration) int {
	deadline := time.Now().Add(wait)
	for {
		l, err := kube.Client.CoordinationV1().Leases("ovn-egress").Get(context.Background(), "ovn-egress-master", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			for i, m := range c.masters {
				if *l.Spec.HolderIdentity == masterIdentity(i) && m.Exited() == nil {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			return -1
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// apiDown reports whether the API server or etcd is down: no fault
// starts then (the harness writes through the API) and the driver waits.
func (s *chaosState) apiDown(string) bool {
	for k := range s.active {
		if strings.HasPrefix(k, "apiserver-restart/") || strings.HasPrefix(k, "etcd-restart/") {
			return true
		}
	}
	return false
}

// heal ends a fault the schedule started.
func (s *chaosState) heal(ev chaosEvent) {
	c, key := s.c, ev.kind+"/"+ev.target
	if !s.active[key] {
		return
	}
	delete(s.active, key)
	switch ev.kind {
	case "nb-restart":
		if err := c.ovn.StartNB(); err != nil {
			c.t.Fatalf("NB restart: %v", err)
		}
		s.nbDown = false
	case "master-kill": // supervise starts a new replica, standing by
	case "apiserver-restart":
		if err := kube.StartAPIServer(); err != nil {
			c.t.Fatalf("kube-apiserver restart: %v", err)
		}
	case "etcd-restart":
		if err := kube.StartEtcd(); err != nil {
			c.t.Fatalf("etcd restart: %v", err)
		}
	case "agent-kill":
		c.agents[ev.target] = c.startAgent(ev.target)
	case "agent-freeze":
		_ = syscall.Kill(c.agents[ev.target].Pid(), syscall.SIGCONT)
		delete(s.frozen, ev.target)
	case "node-notready":
		c.setReady(ev.target, true)
	}
}

// healAll ends every fault still running.
func (s *chaosState) healAll() {
	keys := slices.Collect(maps.Keys(s.active))
	slices.SortFunc(keys, apiFirst)
	for _, key := range keys {
		kind, target, _ := strings.Cut(key, "/")
		s.heal(chaosEvent{kind: kind, target: target, end: true})
	}
}

// apiFirst orders fault keys so that the API server and etcd heal first.
func apiFirst(a, b string) int {
	api := func(k string) bool { return strings.HasPrefix(k, "apiserver-") || strings.HasPrefix(k, "etcd-") }
	switch {
	case api(a) && !api(b):
		return -1
	case api(b) && !api(a):
		return 1
	}
	return strings.Compare(a, b)
}

// converged checks, without asking the product, that the cluster settles
// once the faults are healed: every service has a host that its selector
// and the nodes allow (or none when no node is eligible), its endpoints
// leave with its LB IP (its other pods with their node's address), and
// `ovn-egress verify` finds the NB exactly as the objects require.
func (s *chaosState) converged(lbs map[string][]netip.Addr) {
	c := s.c
	for _, name := range chaosServices {
		eligible := s.eligible(name)
		h := c.host(name, func(h string) bool { return (len(eligible) == 0 && h == "") || slices.Contains(eligible, h) })
		for _, p := range s.pools[name] {
			want := c.nodeAddr(p.node)
			if h != "" && slices.Contains(s.endpoints[name], p) {
				want = only(lbs[name])
			}
			c.expectSource(p, 45*time.Second, want)
		}
	}
	s.hostAgreement(lbs)
	args := append([]string{"verify", "--kubeconfig=" + kube.Kubeconfig, "--nb-address=" + c.ovn.NBAddress(), "--snat-backend=host", "--unassigned-traffic=" + c.opts.unassigned}, c.subnetFlags()...)
	var out []byte
	var err error
	c.eventually("ovn-egress verify to find no drift", 30*time.Second, func() bool {
		out, err = exec.Command(bin, args...).CombinedOutput()
		return err == nil
	})
	c.t.Logf("ovn-egress verify: %s", strings.TrimSpace(string(out)))
}

// eligible are the nodes service name may be hosted on now: Ready nodes
// its selector matches.
func (s *chaosState) eligible(name string) []string {
	es, err := kube.Egress.K8sV1().EgressServices(s.c.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		s.c.t.Fatal(err)
	}
	var out []string
	for _, n := range s.c.topo.Nodes {
		node, err := kube.Client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			s.c.t.Fatal(err)
		}
		sel, err := metav1.LabelSelectorAsSelector(&es.Spec.NodeSelector)
		if err == nil && sel.Matches(labels.Set(node.Labels)) {
			out = append(out, n.Name)
		}
	}
	return out
}

// patchNode merge-patches node's labels (nil removes one).
func (c *cluster) patchNode(node string, lbls map[string]any) {
	c.t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": lbls}})
	if _, err := kube.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// probers ask the outside from every pod all the time and check each
// answer's source: the LB IP of the pod's service or the address of the
// pod's node — never anything else.
type probers struct {
	mu         sync.Mutex
	answered   int
	unanswered int
	sources    map[string]int
	violations []string
	done       chan struct{}
	wg         sync.WaitGroup
}

func (c *cluster) startProbers(pools map[string][]*pod, lbs map[string][]netip.Addr) *probers {
	pr := &probers{sources: map[string]int{}, done: make(chan struct{})}
	ext := c.dp.ExtIPs()
	for name, pods := range pools {
		for _, p := range pods {
			allowed := map[netip.Addr]string{}
			for _, ip := range lbs[name] {
				allowed[ip] = "lb"
			}
			for _, f := range c.opts.families {
				for _, ip := range c.nodeAddr(p.node)(f) {
					allowed[ip] = "node"
				}
			}
			pr.wg.Add(1)
			go func() {
				defer pr.wg.Done()
				for i := 0; ; i++ {
					select {
					case <-pr.done:
						return
					case <-time.After(200 * time.Millisecond):
					}
					dst := ext[i%len(ext)]
					got, err := testenv.Ask(p.ns, "tcp", netip.AddrPortFrom(dst, echoPort), 500*time.Millisecond)
					pr.mu.Lock()
					switch class, ok := allowed[got]; {
					case err != nil:
						pr.unanswered++
					case ok:
						pr.answered++
						pr.sources[class]++
					default:
						pr.answered++
						pr.sources["other"]++
						pr.violations = append(pr.violations, fmt.Sprintf("%s %s (%s) seen as %s", time.Now().Format("15:04:05.000"), p.name, name, got))
					}
					pr.mu.Unlock()
				}
			}()
		}
	}
	return pr
}

func (pr *probers) stop() { close(pr.done); pr.wg.Wait() }

func (pr *probers) results() (int, int, map[string]int, []string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.answered, pr.unanswered, pr.sources, pr.violations
}
