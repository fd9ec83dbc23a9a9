// Package status is the master's status controller: it writes each
// EgressService's status.conditions (conditions.EgressService: Ready,
// HostAssigned, AgentsReady, Announced) through the status subresource,
// only when they change. It reads host selection's problems (why a service
// has no host), the node agents' readiness reports and MetalLB's
// ServiceL2Status where the API serves it. Host selection owns
// status.host; this controller never writes it.
//
// It is level-driven: handlers enqueue the keys of the EgressServices an
// event concerns, and a sync reads everything from the listers again.
package status

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	egresslisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/listers/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Name names the controller in logs and metrics.
const Name = "status"

// fieldManager names this controller's writes.
const fieldManager = "ovn-egress-status"

// Config tunes the controller.
type Config struct {
	// ClusterSubnets tell cluster-networked endpoints from host-networked
	// ones (the master copies translation's).
	ClusterSubnets []netip.Prefix
	// HostProblems, when set, says why host selection left a service
	// without a host (the selection controller).
	HostProblems HostProblems
	// Reports are the node agents' report ConfigMaps (informer.Reports); a
	// node without one is read from its Node's legacy annotation.
	Reports coreinformers.ConfigMapInformer
	// Discovery and Dynamic, when set, read MetalLB's ServiceL2Statuses
	// once the API serves them (asked every Layer2Recheck, default
	// DefaultLayer2Recheck, until it does); before, and without them,
	// Announced is Unknown.
	Discovery     discovery.DiscoveryInterface
	Dynamic       dynamic.Interface
	Layer2Recheck time.Duration
	// Standoff, when set, says when ovn-egress stands back (each Ready
	// says so: OVNKubernetesConflict) and which services' status another
	// writer holds (their conditions are left alone).
	Standoff Standoff
	// MaxBatch bounds the services synced together (default 500); Writers
	// the concurrent status writes (default 16).
	MaxBatch, Writers int
	// Work, when set, instruments the worker.
	Work *controller.Metrics
	// Now is the clock of lastTransitionTime (default time.Now).
	Now func() time.Time
}

// HostProblems is what the controller needs of host selection.
type HostProblems interface {
	// HostProblems are the problems of the service's last host decision.
	HostProblems(key string) translate.Problems
	// HostsDecided reports whether every service has been decided once
	// (before, a service without a host has no reason yet).
	HostsDecided() bool
}

// Standoff tells the controller when ovn-egress stands back, and which
// services are held by another writer.
type Standoff interface {
	Blocked() (why string, blocked bool)
	Held(key string) bool
}

// Controller writes the conditions. Build it with New before the informer
// factories start; only the leader runs it.
type Controller struct {
	cfg    Config
	log    *logrus.Entry
	egress egressclient.Interface

	esLister    egresslisters.EgressServiceLister
	esIndexer   cache.Indexer
	svcLister   corelisters.ServiceLister
	sliceIndex  cache.Indexer
	nodeLister  corelisters.NodeLister
	reportIndex cache.Indexer // nil without Config.Reports
	layer2      *layer2       // nil without Config.Discovery and Dynamic
	synced      []cache.InformerSynced
	work        *controller.Worker[string]
	statsMu     sync.Mutex
	stats       Stats
}

// Stats counts what the controller did.
type Stats struct {
	// Syncs counts batches synced; Writes the status writes that
	// succeeded; Conflicts those refused with a conflict (the newer
	// version's event syncs the service again).
	Syncs, Writes, Conflicts int
}

// New wires the controller to the informer factories (not started yet).
func New(cfg Config, log *logrus.Entry, egress egressclient.Interface, kubeInf kubeinformers.SharedInformerFactory,
	egressInf egressinformers.SharedInformerFactory) (*Controller, error) {
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 500
	}
	if cfg.Writers == 0 {
		cfg.Writers = 16
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	esInf := egressInf.K8s().V1().EgressServices()
	svcInf := kubeInf.Core().V1().Services()
	sliceInf := kubeInf.Discovery().V1().EndpointSlices()
	nodeInf := kubeInf.Core().V1().Nodes()
	if err := controller.AddIndexers(esInf.Informer(), controller.IndexByHost); err != nil {
		return nil, fmt.Errorf("egressservice: %w", err)
	}
	if err := controller.AddIndexers(sliceInf.Informer(), controller.IndexByService); err != nil {
		return nil, fmt.Errorf("endpointslice: %w", err)
	}
	c := &Controller{cfg: cfg, log: log, egress: egress,
		esLister: esInf.Lister(), esIndexer: esInf.Informer().GetIndexer(), svcLister: svcInf.Lister(),
		sliceIndex: sliceInf.Informer().GetIndexer(), nodeLister: nodeInf.Lister(),
		synced: []cache.InformerSynced{esInf.Informer().HasSynced, svcInf.Informer().HasSynced,
			sliceInf.Informer().HasSynced, nodeInf.Informer().HasSynced}}
	if cfg.Reports != nil {
		if err := controller.AddIndexers(cfg.Reports.Informer(), controller.IndexByReportNode); err != nil {
			return nil, fmt.Errorf("report configmaps: %w", err)
		}
		c.reportIndex = cfg.Reports.Informer().GetIndexer()
		c.synced = append(c.synced, cfg.Reports.Informer().HasSynced)
	}
	if cfg.Discovery != nil && cfg.Dynamic != nil {
		if cfg.Layer2Recheck == 0 {
			cfg.Layer2Recheck = DefaultLayer2Recheck
		}
		c.layer2 = &layer2{discovery: cfg.Discovery, dynamic: cfg.Dynamic, recheck: cfg.Layer2Recheck}
	}
	c.work = controller.New(controller.Config[string]{Name: Name, MaxBatch: cfg.MaxBatch, Metrics: cfg.Work}, c.sync, log)
	if err := c.registerHandlers(esInf.Informer(), svcInf.Informer(), sliceInf.Informer(), nodeInf.Informer()); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the caches and converges every EgressService, then each
// one an event concerns, until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	if err := controller.WaitSynced(ctx, c.synced...); err != nil {
		return err
	}
	// The first conditions wait for host selection's first decisions:
	// otherwise a restart would write every unhosted service's reason twice
	// (none known yet, then the real one).
	if h := c.cfg.HostProblems; h != nil {
		if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) { return h.HostsDecided(), nil }); err != nil {
			return nil
		}
	}
	c.EnqueueAll()
	var wg sync.WaitGroup
	if c.layer2 != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.layer2.run(ctx, c.layer2Handler(), func() {
				c.log.Info("reading MetalLB's ServiceL2Statuses")
				c.EnqueueAll()
			}, func(err error) { c.log.WithError(err).Warn("MetalLB's ServiceL2Status") })
		}()
	}
	c.log.Info("status conditions started")
	c.work.Run(ctx)
	wg.Wait()
	c.log.Info("status conditions stopped")
	return nil
}

// EnqueueAll converges every EgressService again.
func (c *Controller) EnqueueAll() {
	var keys []string
	for _, o := range c.esIndexer.List() {
		if es, ok := o.(*egressv1.EgressService); ok {
			keys = append(keys, translate.EgressServiceKey(es))
		}
	}
	c.work.Add(keys...)
}

// Enqueue converges the EgressService "namespace/name" (host selection's
// problems of it changed).
func (c *Controller) Enqueue(key string) { c.work.Add(key) }

// Stats returns the counts so far.
func (c *Controller) Stats() Stats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.stats
}

// Idle reports whether no key waits or syncs.
func (c *Controller) Idle() bool { return c.work.Idle() }

// Stuck reports a key that has waited longer than bound.
func (c *Controller) Stuck(bound time.Duration) error { return c.work.Stuck(bound) }

// Synced reports whether the controller's informers have synced.
func (c *Controller) Synced() bool { return controller.Synced(c.synced) }
