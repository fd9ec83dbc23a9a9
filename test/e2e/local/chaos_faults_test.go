//go:build chaos

package local

import (
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// chaosState is what the schedule changed and has not healed yet, and the
// run's history.
type chaosState struct {
	c         *cluster
	rng       *rand.Rand
	pools     map[string][]*pod
	frozen    map[string]bool
	active    map[string]bool // "kind/target" of running faults
	nbDown    bool            // an NB fault (the leader killed, or every member) holds
	nbMember  int             // the NB member a nb-leader-kill killed
	cutPod    int             // the master pod a master-cut cut off
	restarted map[string]int

	mu        sync.Mutex // guards what the probers and the monitor read
	endpoints map[string][]*pod
	lbs       map[string][]netip.Addr // a service's LB IPs now
	everLB    map[string][]netip.Addr // every LB IP a service may have
	history   []historyEntry
	faults    []faultSpan
}

type historyEntry struct {
	at   time.Time
	what string
}

// faultSpan is one injected fault, from its start to its heal.
type faultSpan struct {
	kind       string
	start, end time.Time // end zero: not healed
}

func newChaosState(c *cluster, rng *rand.Rand, pools map[string][]*pod) *chaosState {
	s := &chaosState{c: c, rng: rng, pools: pools, endpoints: map[string][]*pod{}, frozen: map[string]bool{}, active: map[string]bool{},
		restarted: map[string]int{}, lbs: map[string][]netip.Addr{}, everLB: map[string][]netip.Addr{}}
	for name, p := range pools {
		s.endpoints[name] = p
	}
	return s
}

// record adds a line to the history (and the test's log).
func (s *chaosState) record(what string) {
	now := time.Now()
	s.mu.Lock()
	s.history = append(s.history, historyEntry{now, what})
	s.mu.Unlock()
	s.c.t.Logf("%s %s", now.Format("15:04:05.000"), what)
}

// historyAround renders the history from 5 s before to 2 s after each of
// the first n times.
func (s *chaosState) historyAround(times []time.Time, n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, at := range times[:min(n, len(times))] {
		out = append(out, "--- around "+at.Format("15:04:05.000"))
		for _, h := range s.history {
			if h.at.After(at.Add(-5*time.Second)) && h.at.Before(at.Add(2*time.Second)) {
				out = append(out, h.at.Format("15:04:05.000")+" "+h.what)
			}
		}
	}
	return out
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
		s.record("supervisor started master-" + strconv.Itoa(len(c.masters)-1))
	}
	for _, n := range c.topo.Nodes {
		if !s.active["agent-kill/"+n.Name] && c.agents[n.Name].Exited() != nil {
			c.t.Logf("agent %s exited on its own: %v", n.Name, c.agents[n.Name].Exited())
			c.agents[n.Name] = c.startAgent(n.Name)
			s.restarted["agent"]++
			s.record("supervisor started the agent of " + n.Name)
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
		s.record("relabel " + n + " egress=" + anyString(v))
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
		var addrs, names []string
		for _, p := range eps {
			names = append(names, p.name)
			for _, ip := range p.ips {
				addrs = append(addrs, ip.String()+"@"+p.node)
			}
		}
		kube.SetEndpoints(c.t, c.ns, ev.target, addrs...)
		s.mu.Lock()
		s.endpoints[ev.target] = eps
		s.mu.Unlock()
		s.record("endpoints of " + ev.target + ": " + strings.Join(names, ","))
	case "recreate": // the EgressService deleted and created again
		if err := kube.Egress.K8sV1().EgressServices(c.ns).Delete(context.Background(), ev.target, metav1.DeleteOptions{}); err == nil {
			c.egressService(ev.target, egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "a"}}})
		}
		s.record("recreate " + ev.target)
	case "selector": // egress=a, or every node
		sel := map[string]any{"egress": "a"}
		if s.rng.IntN(3) == 0 {
			sel = map[string]any{"egress": nil}
		}
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodeSelector": map[string]any{"matchLabels": sel}}})
		if _, err := kube.Egress.K8sV1().EgressServices(c.ns).Patch(context.Background(), ev.target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			c.t.Logf("selector of %s: %v", ev.target, err) // a recreate may be on its way
		}
		s.record("selector of " + ev.target + ": " + anyString(sel))
	case "lb-ip": // the Service asks MetalLB for its other LB IPs
		k := slices.Index(chaosServices, ev.target)
		s.mu.Lock()
		if slices.Equal(s.lbs[ev.target], c.lbAddrs(k)) {
			k += spareLB
		}
		s.mu.Unlock()
		ips := c.lbAddrs(k)
		var ing []string
		for _, ip := range ips {
			ing = append(ing, ip.String())
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"metallb.io/loadBalancerIPs": strings.Join(ing, ",")}}})
		if _, err := kube.Client.CoreV1().Services(c.ns).Patch(context.Background(), ev.target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			c.t.Fatalf("LB IPs of %s: %v", ev.target, err)
		}
		s.mu.Lock()
		s.lbs[ev.target] = ips
		s.mu.Unlock()
		s.record("LB IPs of " + ev.target + ": " + strings.Join(ing, ","))
	}
}

// inject starts a fault; false when it cannot start now (one of its kind
// holds the target, the NB or the API is already down, nobody leads).
func (s *chaosState) inject(ev chaosEvent) bool {
	c, key := s.c, ev.kind+"/"+ev.target
	if s.active[key] || (s.apiDown() && needsAPI(ev.kind)) {
		return false
	}
	switch ev.kind {
	case "nb-leader-kill": // the RAFT cluster keeps its quorum with two members
		if s.nbDown {
			return false
		}
		if s.nbMember = c.ovn.KillNBLeader(); s.nbMember < 0 {
			return false
		}
		s.nbDown = true
	case "nb-leader-freeze": // a hung leader (SIGSTOP): connections open, no answers; the others elect a new one
		if s.nbDown {
			return false
		}
		if s.nbMember = c.ovn.FreezeNBLeader(); s.nbMember < 0 {
			return false
		}
		s.nbDown = true
	case "nb-restart": // every member killed, started again at the heal
		if s.nbDown {
			return false
		}
		c.ovn.KillNB()
		s.nbDown = true
	case "master-kill":
		i := c.liveLeader(5 * time.Second)
		if i < 0 {
			return false // nobody leads yet (a restarted API server, replicas starting)
		}
		c.masters[i].Kill() // the standby takes the Lease
	case "master-cut": // the active master's pod loses the API server, the NB or both
		if s.activeKind("master-cut") {
			return false
		}
		i := c.liveLeader(5 * time.Second)
		if i < 0 {
			return false
		}
		s.cutPod = c.masterPod[i]
		c.cutMasterPod(s.cutPod, ev.target)
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
	s.mu.Lock()
	s.faults = append(s.faults, faultSpan{kind: ev.kind, start: time.Now()})
	s.mu.Unlock()
	s.record("fault " + ev.kind + " on " + ev.target)
	return true
}

// needsAPI reports whether a fault kind needs the API server to start (to
// find the leader, to write a Node) or is itself an API outage (one at a
// time); the NB's and the agents' faults start while the API is away.
func needsAPI(kind string) bool {
	return !strings.HasPrefix(kind, "nb-") && !strings.HasPrefix(kind, "agent-")
}

// activeKind reports whether a fault of kind holds any target.
func (s *chaosState) activeKind(kind string) bool {
	for k := range s.active {
		if strings.HasPrefix(k, kind+"/") {
			return true
		}
	}
	return false
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

// cutMasterPod drops, in master pod i's own network namespace, its traffic
// to the API server, the NB or both (what: "api", "nb", "api+nb"): both
// directions on the pod's loopback, where its connections to them pass
// (NetNS.ForwardLoopback), new and established alike — a partition, not a
// refusal.
func (c *cluster) cutMasterPod(i int, what string) {
	c.t.Helper()
	var ports []string
	if strings.Contains(what, "api") {
		_, port, _ := strings.Cut(strings.TrimPrefix(kube.Config.Host, "https://"), ":")
		ports = append(ports, port)
	}
	if strings.Contains(what, "nb") {
		for _, a := range c.ovn.NBTCPAddresses() {
			ports = append(ports, a[strings.LastIndex(a, ":")+1:])
		}
	}
	set := "{ " + strings.Join(ports, ", ") + " }"
	ns := c.mpods[i]
	ns.MustRun(c.t, "nft", "add", "table", "inet", "oe-cut")
	ns.MustRun(c.t, "nft", "add", "chain", "inet", "oe-cut", "out", "{ type filter hook output priority 0; policy accept; }")
	ns.MustRun(c.t, "nft", "add", "rule", "inet", "oe-cut", "out", "oif", "lo", "tcp", "dport", set, "drop")
	ns.MustRun(c.t, "nft", "add", "rule", "inet", "oe-cut", "out", "oif", "lo", "tcp", "sport", set, "drop")
}

// healMasterPod ends cutMasterPod.
func (c *cluster) healMasterPod(i int) {
	c.t.Helper()
	c.mpods[i].MustRun(c.t, "nft", "delete", "table", "inet", "oe-cut")
}

// apiDown reports whether the API server or etcd is down: the driver waits
// then (it writes through the API), and so do the faults that need it.
func (s *chaosState) apiDown() bool {
	return s.activeKind("apiserver-restart") || s.activeKind("etcd-restart")
}

// heal ends a fault the schedule started.
func (s *chaosState) heal(ev chaosEvent) {
	c, key := s.c, ev.kind+"/"+ev.target
	if !s.active[key] {
		return
	}
	delete(s.active, key)
	switch ev.kind {
	case "nb-leader-kill":
		if err := c.ovn.StartNBMember(s.nbMember); err != nil {
			c.t.Fatalf("NB member %d restart: %v", s.nbMember, err)
		}
		s.nbDown = false
	case "nb-leader-freeze":
		c.ovn.ThawNBMember(s.nbMember)
		s.nbDown = false
	case "nb-restart":
		if err := c.ovn.StartNB(); err != nil {
			c.t.Fatalf("NB restart: %v", err)
		}
		s.nbDown = false
	case "master-kill": // supervise starts a new replica, standing by
	case "master-cut":
		c.healMasterPod(s.cutPod)
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
	now := time.Now()
	s.mu.Lock()
	for i := range s.faults {
		if f := &s.faults[i]; f.kind == ev.kind && f.end.IsZero() {
			f.end = now
			break
		}
	}
	s.mu.Unlock()
	s.record("healed " + ev.kind + " on " + ev.target)
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

// currentLBs is a copy of every service's LB IPs now.
func (s *chaosState) currentLBs() map[string][]netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.lbs)
}

// converged checks, without asking the product, that the cluster settles
// once the faults are healed: every service has a host that its selector
// and the nodes allow (or none when no node is eligible), its endpoints
// leave with its LB IP (its other pods with their node's address), and
// `ovn-egress verify` finds the NB exactly as the objects require.
func (s *chaosState) converged() {
	c := s.c
	lbs := s.currentLBs()
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
	var out []byte
	var err error
	c.eventually("ovn-egress verify to find no drift", 30*time.Second, func() bool {
		out, err = c.verify(context.Background())
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
