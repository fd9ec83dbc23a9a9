// Package selection is the master's host-selection controller: it decides
// every EgressService's host with translate.SelectHosts, writes it to
// status.host through the status subresource, keeps the
// egress-service.k8s.ovn.org/<namespace>-<name> label exactly on the host
// (for MetalLB), health-checks the hosts and drains those that stop
// answering, and reports every decision a user can act on as an Event on
// the EgressService. The translation controller (pkg/k8s/translation) follows
// status.host.
//
// It is level-driven: event handlers only enqueue keys (an EgressService's
// "namespace/name", or a node whose labels must be checked), and a sync
// re-reads everything from the listers. Allocation counts are the
// status.host of the EgressServices in the lister, never private memory.
package selection

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	egresslisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/listers/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// fieldManager names this controller's writes.
const fieldManager = "ovn-egress-selection"

// key is what the queue holds: an EgressService, or a node whose labels
// are to be checked.
type key struct {
	node bool
	// name is "namespace/name" of an EgressService, or a node's name.
	name string
}

func (k key) String() string {
	if k.node {
		return "node/" + k.name
	}
	return k.name
}

// Controller selects hosts. Build it with New before the informer factories
// start; only the leader runs it.
type Controller struct {
	cfg      Config
	log      *logrus.Entry
	kube     kubernetes.Interface
	egress   egressclient.Interface
	recorder record.EventRecorder

	esLister  egresslisters.EgressServiceLister
	esIndexer cache.Indexer
	svcLister corelisters.ServiceLister
	svcIndex  cache.Indexer
	// nodeAddrs caches each Node's own addresses (used by the worker only).
	nodeAddrs  map[string]nodeAddrs
	sliceIndex cache.Indexer
	nodeLister corelisters.NodeLister
	synced     []cache.InformerSynced

	work   *controller.Worker[key]
	health *health // nil when health checks are off
	events *events
	moves  *selectorMoves

	statsMu sync.Mutex
	stats   Stats
	// decided: the first pass over every key is done (HostsDecided).
	decided atomic.Bool
}

// Stats counts what the controller did since it was built.
type Stats struct {
	// Syncs counts batches of EgressServices decided.
	Syncs int
	// StatusWrites counts status.host updates that succeeded.
	StatusWrites int
	// Conflicts counts status updates refused with a conflict (and retried).
	Conflicts int
	// LabelPatches counts node label patches that succeeded.
	LabelPatches int
	// Errors counts failed keys (each is retried).
	Errors int
	// Blocked counts the syncs that wrote nothing because of a standoff.
	Blocked int
	// Held counts host changes not written because another writer's
	// status.host holds the service (coexist: a foreign field manager).
	Held int
}

// New wires the controller to the informer factories (not started yet),
// the clients it writes with and the master's event recorder.
func New(cfg Config, log *logrus.Entry, kube kubernetes.Interface, egress egressclient.Interface,
	kubeInf kubeinformers.SharedInformerFactory, egressInf egressinformers.SharedInformerFactory,
	recorder record.EventRecorder) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	esInf := egressInf.K8s().V1().EgressServices()
	svcInf := kubeInf.Core().V1().Services()
	sliceInf := kubeInf.Discovery().V1().EndpointSlices()
	nodeInf := kubeInf.Core().V1().Nodes()
	if err := addIndexers(esInf.Informer(), svcInf.Informer(), sliceInf.Informer()); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg: cfg, log: log, kube: kube, egress: egress, recorder: recorder,
		esLister: esInf.Lister(), esIndexer: esInf.Informer().GetIndexer(),
		svcLister: svcInf.Lister(), svcIndex: svcInf.Informer().GetIndexer(), sliceIndex: sliceInf.Informer().GetIndexer(), nodeLister: nodeInf.Lister(),
		synced: []cache.InformerSynced{esInf.Informer().HasSynced, svcInf.Informer().HasSynced,
			sliceInf.Informer().HasSynced, nodeInf.Informer().HasSynced},
		events: newEvents(recorder, cfg.UnassignedTraffic == translate.UnassignedDrop, cfg.ProblemsChanged),
		moves:  newSelectorMoves(cfg.SelectorMoveDamping),
	}
	c.work = controller.New(controller.Config[key]{Name: "selection", MaxBatch: cfg.MaxBatch, Metrics: cfg.Work}, c.syncKeys, log)
	if p := cfg.prober(); p != nil {
		c.health = newHealth(p, cfg.HealthInterval, cfg.HealthTimeout, cfg.HealthHoldDown, log.WithField("part", "health"), c.probeTargets, c.reachabilityChanged)
		c.health.maxRate = cfg.HealthMaxRate
		c.health.metrics = cfg.Metrics
	}
	if err := cfg.Metrics.collectStates(c); err != nil {
		return nil, fmt.Errorf("egressservice state metric: %w", err)
	}
	if err := c.registerHandlers(esInf.Informer(), svcInf.Informer(), sliceInf.Informer(), nodeInf.Informer()); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the caches, repairs (every EgressService and every node in
// one pass: valid hosts adopted, invalid ones replaced or cleared, stray
// labels removed), starts the health checks and converges until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	c.log.Info("waiting for informer caches")
	if err := controller.WaitSynced(ctx, c.synced...); err != nil {
		return err
	}
	c.repair(ctx)
	c.decided.Store(true)
	var wg sync.WaitGroup
	if c.health != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.health.run(ctx)
		}()
	}
	c.log.WithField("health-checks", c.health != nil).Info("host selection started")
	c.work.Run(ctx)
	wg.Wait()
	c.log.Info("host selection stopped")
	return nil
}

// repair converges every key once, before anything else runs. Keys that
// fail go to the queue with backoff.
func (c *Controller) repair(ctx context.Context) {
	defer c.work.Hold()()
	var keys []key
	for _, o := range c.esIndexer.List() {
		if es, ok := o.(*egressv1.EgressService); ok {
			keys = append(keys, key{name: translate.EgressServiceKey(es)})
		}
	}
	nodes, _ := c.nodeLister.List(labels.Everything())
	for _, n := range nodes {
		keys = append(keys, key{node: true, name: n.Name})
	}
	errs, sum := c.sync(ctx, keys)
	for _, k := range keys {
		if errs[k] != nil {
			c.work.Retry(ctx, k, errs[k])
		}
	}
	c.log.WithFields(logrus.Fields{"egressservices": sum.decided, "adopted": sum.adopted, "assigned": sum.assigned,
		"moved": sum.moved, "cleared": sum.cleared, "label-patches": sum.labelPatches}).Info("startup repair done")
}

// EnqueueAll converges every EgressService and every node's labels again
// (after a standoff ended).
func (c *Controller) EnqueueAll() {
	for _, o := range c.esIndexer.List() {
		if es, ok := o.(*egressv1.EgressService); ok {
			c.work.Add(key{name: translate.EgressServiceKey(es)})
		}
	}
	nodes, _ := c.nodeLister.List(labels.Everything())
	for _, n := range nodes {
		c.work.Add(key{node: true, name: n.Name})
	}
}

// syncKeys is the worker's SyncFunc: each failed key's own error.
func (c *Controller) syncKeys(ctx context.Context, keys []key) error {
	errs, _ := c.sync(ctx, keys)
	failed := controller.KeyErrors[key]{}
	for k, err := range errs {
		if err != nil {
			failed[k] = err
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return failed
}

// probeTargets are the nodes health checks probe: every node that is
// status.host of an EgressService, and every node now unreachable, with
// their management-port addresses (k8s.ovn.org/node-subnets, .2). A node
// without them cannot be probed and counts as reachable.
func (c *Controller) probeTargets(unreachable map[string]bool) map[string][]netip.Addr {
	names := map[string]bool{}
	for _, h := range c.esIndexer.ListIndexFuncValues(controller.IndexByHost) {
		if h != "" && h != egressv1.HostAll {
			names[h] = true
		}
	}
	for n := range unreachable {
		names[n] = true
	}
	if c.cfg.AlsoProbe != nil {
		for _, n := range c.cfg.AlsoProbe() {
			names[n] = true
		}
	}
	out := map[string][]netip.Addr{}
	for name := range names {
		n, err := c.nodeLister.Get(name)
		if err != nil {
			continue
		}
		info := translate.ParseNode(n, nil)
		var addrs []netip.Addr
		for _, f := range ipfamily.All {
			if a, ok := info.MgmtIPs[f]; ok {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) > 0 {
			out[name] = addrs
		}
	}
	return out
}

// reachabilityChanged drains an unreachable node's EgressServices, or lets
// the unassigned ones try a node that answers again.
func (c *Controller) reachabilityChanged(node string, reachable bool) {
	if reachable {
		c.enqueueHostedOn("")
	} else {
		c.enqueueHostedOn(node)
	}
	if c.cfg.OnReachability != nil {
		c.cfg.OnReachability(node, reachable)
	}
}

// Unreachable returns the nodes the health checks find unreachable now
// (empty when health checks are off).
func (c *Controller) Unreachable() map[string]bool {
	if c.health == nil {
		return map[string]bool{}
	}
	return c.health.snapshot()
}

// Recovering returns the reachable nodes still in their hold-down after
// being unreachable.
func (c *Controller) Recovering() map[string]bool { return c.health.recovering() }

// Stats returns the counters so far.
func (c *Controller) Stats() Stats {
	c.statsMu.Lock()
	st := c.stats
	c.statsMu.Unlock()
	st.Errors = c.work.Stats().Errors
	return st
}

// Idle reports whether no key waits or is being synced.
func (c *Controller) Idle() bool { return c.work.Idle() }

// Stuck returns an error when one sync has run longer than bound.
func (c *Controller) Stuck(bound time.Duration) error { return c.work.Stuck(bound) }

// HealthRounds counts the probe rounds run so far (0 when health checks are off).
func (c *Controller) HealthRounds() int {
	if c.health == nil {
		return 0
	}
	return c.health.roundCount()
}

// HostProblems are the problems of the service's last host decision (why
// it has no host, when it has none).
func (c *Controller) HostProblems(key string) translate.Problems { return c.events.hostProblems(key) }

// HostsDecided reports whether every EgressService has been decided once
// since the controller started (its problems are known).
func (c *Controller) HostsDecided() bool { return c.decided.Load() }

// Synced reports whether the controller's informers have synced.
func (c *Controller) Synced() bool { return controller.Synced(c.synced) }
