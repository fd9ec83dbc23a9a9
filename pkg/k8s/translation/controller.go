// Package translation is the translation controller: the one NB runtime of
// ovn-egress. It watches the objects the rows are made of and the NB rows
// it owns, maps every event to keys of one worker, and converges them: each
// API's translator gathers what its keys name and says which rows to write
// (the EgressServices' from their translate.Index, the EgressIPs' from
// translate.TranslateEgressIPs), and one applier writes the difference
// between those rows and NB in one transaction.
//
// The master runs it against the central NB; in interconnect each node
// agent runs one for its own zone (package zone).
package translation

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/sirupsen/logrus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Name names the controller in logs and metrics.
const Name = "translation"

// Config tunes the controller.
type Config struct {
	Translate translate.Config
	// BatchWindow delays a sync after the first dirty key to gather more
	// (used with the ovn backend, where every NAT transaction costs ovn-northd
	// 23.03 a full recompute). Zero syncs at once.
	BatchWindow time.Duration
	// AutoBatchWindow chooses BatchWindow from the connected NB (ovn
	// backend): DefaultNATBatchWindow where NAT rows change with every
	// endpoint (an NB without NAT.match), none where endpoint changes are
	// address-set writes (NAT.match).
	AutoBatchWindow bool
	// ResyncInterval re-converges everything periodically (0 disables).
	ResyncInterval time.Duration
	// HostMoves, when set, is closed by host selection while it writes
	// status.host and until its informer shows the writes: a sync waits for
	// it (at most HostMovesBound, default DefaultHostMovesBound), so a drain
	// is repointed in one sync rather than one per echo.
	HostMoves      *controller.Gate
	HostMovesBound time.Duration
	// MaxBatch bounds the keys synced together.
	MaxBatch int
	// MaxOps bounds the operations of one NB transaction.
	MaxOps int
	// ApplyTimeout bounds one sync's NB writes (default DefaultApplyTimeout).
	ApplyTimeout time.Duration
	// Zone, when set, translates only that interconnect zone into its own
	// NB (a node agent's job in interconnect mode); empty: the central NB.
	Zone string
	// EventReasons are the translation problems recorded as Warning Events
	// (nil: the default set; zone controllers record fewer, since every
	// zone would report the same problem).
	EventReasons map[translate.Reason]bool
	// Standoff, when set, says when to write nothing (ovn-kubernetes' own
	// egress-service feature is active: coexist.Detector). Keys synced
	// meanwhile are done; EnqueueAll converges everything once it is over.
	Standoff Standoff
	// Work, when set, instruments the worker; NB, the NB transactions.
	Work *controller.Metrics
	NB   *ovn.Metrics
	// Failovers, when set, is told when a drained service's endpoints are
	// written into its new host's rows.
	Failovers Failovers
	// Reports, when set, are the node agents' report ConfigMaps
	// (informer.Reports); a node without one is read from its Node's
	// legacy annotation.
	Reports coreinformers.ConfigMapInformer
	// EgressIP, when set, writes the EgressIPs' rows too, in the same
	// transactions. In a zone its nodes holding EgressIPs get the cluster
	// src-ip route to their GR as a host does (translate.ZoneFacts.EgressNodes).
	EgressIP *EgressIPConfig
}

// Failovers follows services drained off a dead host.
type Failovers interface {
	// Pending reports whether any drained service waits for its rows.
	Pending() bool
	// Repointed says the service's endpoints are in host's rows in NB.
	Repointed(service, host string)
}

// Standoff tells the controllers to write nothing, and why.
type Standoff interface {
	Blocked() (why string, blocked bool)
}

// DefaultHostMovesBound bounds how long a sync waits for host selection's
// writes (Config.HostMoves): a drain of a host's few hundred services is
// written and seen in well under it (0.2–0.5 s measured), and a batch of a
// thousand at a restart holds translation no longer than this at a time.
const DefaultHostMovesBound = time.Second

// DefaultNATBatchWindow is the batch window of the ovn backend on an NB
// without NAT.match.
const DefaultNATBatchWindow = time.Second

// DefaultApplyTimeout bounds one sync's NB writes.
const DefaultApplyTimeout = 30 * time.Second

// Validate checks the configuration; a zero size means its default
// (WithDefaults). It changes nothing.
func (c Config) Validate() error {
	if err := c.Translate.Validate(); err != nil {
		return err
	}
	if c.BatchWindow < 0 || c.ResyncInterval < 0 || c.MaxBatch < 0 || c.HostMovesBound < 0 || c.ApplyTimeout < 0 {
		return fmt.Errorf("negative durations and sizes are not allowed")
	}
	return nil
}

// WithDefaults returns c with the default of each size left zero.
func (c Config) WithDefaults() Config {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.HostMovesBound <= 0 {
		c.HostMovesBound = DefaultHostMovesBound
	}
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = DefaultApplyTimeout
	}
	return c
}

// Controller converges the NB rows ovn-egress owns on the cluster's objects.
type Controller struct {
	cfg     Config
	log     *logrus.Entry
	nb      client.Client
	applier *ovn.Applier
	synced  []cache.InformerSynced

	work *controller.Worker[Key]
	// es is the EgressService translator, eip the EgressIP one (nil:
	// Config.EgressIP unset); only the worker touches them.
	es     *egressServices
	eip    *egressIPs
	events *problemEvents
	wanted *wantedSets

	statsMu sync.Mutex
	stats   SyncStats
	// eipStats and eipStanding are the EgressIP translator's, as of its
	// last sync.
	eipStats    EgressIPStats
	eipStanding bool
}

// SyncStats counts what the controller did since it started.
type SyncStats struct {
	Syncs        int
	Transactions int
	Operations   int
	Changes      int
	Errors       int
	// Blocked counts the syncs that wrote nothing because of a standoff.
	Blocked int
	// Services counts the EgressServices translated: a drain translates
	// the services that moved, not every service of the hosts they moved to.
	Services int
}

// New wires the controller to the informer factories (not yet started) and a
// connected NB client whose monitor is complete. What translation may use of
// the NB's schema (NAT.match) is taken from the client.
func New(cfg Config, log *logrus.Entry, nb client.Client, kubeInf kubeinformers.SharedInformerFactory,
	egressInf egressinformers.SharedInformerFactory, recorder record.EventRecorder) (*Controller, error) {
	features := ovn.FeaturesOf(nb)
	cfg.Translate.NATMatch = features.NATMatch
	if cfg.AutoBatchWindow {
		cfg.BatchWindow = 0
		if cfg.Translate.Backend == translate.BackendOVN && !features.NATMatch {
			cfg.BatchWindow = DefaultNATBatchWindow
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if cfg.Translate.Backend == translate.BackendOVN {
		shape := "one NAT row per endpoint"
		if features.NATMatch {
			shape = "one NAT row per service, matching its address set"
		}
		log.WithField("nat-batch-window", cfg.BatchWindow).Infof("%s: the gateway path writes %s", features, shape)
	}
	esInf := egressInf.K8s().V1().EgressServices()
	svcInf := kubeInf.Core().V1().Services()
	sliceInf := kubeInf.Discovery().V1().EndpointSlices()
	nodeInf := kubeInf.Core().V1().Nodes()
	if err := controller.AddIndexers(sliceInf.Informer(), controller.IndexByService); err != nil {
		return nil, fmt.Errorf("endpointslice: %w", err)
	}
	c := &Controller{
		cfg: cfg, log: log, nb: nb, applier: ovn.NewApplier(nb, cfg.MaxOps).WithMetrics(cfg.NB),
		synced: []cache.InformerSynced{esInf.Informer().HasSynced, svcInf.Informer().HasSynced, sliceInf.Informer().HasSynced, nodeInf.Informer().HasSynced},
		es: &egressServices{cfg: cfg, nb: nb, esLister: esInf.Lister(), svcLister: svcInf.Lister(),
			sliceIndex: sliceInf.Informer().GetIndexer(), nodeLister: nodeInf.Lister()},
		events: newProblemEvents(recorder, cfg.EventReasons), wanted: newWantedSets(),
	}
	c.work = controller.New(controller.Config[Key]{Name: Name, MaxBatch: cfg.MaxBatch,
		Window: func() time.Duration { return c.cfg.BatchWindow }, Gate: cfg.HostMoves, GateBound: cfg.HostMovesBound,
		Metrics: cfg.Work}, c.sync, log)
	if cfg.EgressIP != nil {
		var synced []cache.InformerSynced
		var err error
		if c.eip, synced, err = newEgressIPs(cfg, log, nb, kubeInf, recorder, c.work); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, synced...)
		if cfg.Zone != "" {
			if err := c.watchEgressNodes(cfg.EgressIP.Informers.K8s().V1().EgressIPs()); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Reports != nil {
		c.es.reportLister = cfg.Reports.Lister()
		c.synced = append(c.synced, cfg.Reports.Informer().HasSynced)
		if _, err := cfg.Reports.Informer().AddEventHandler(c.reportHandler()); err != nil {
			return nil, err
		}
	}
	if err := c.registerHandlers(esInf.Informer(), svcInf.Informer(), sliceInf.Informer(), nodeInf.Informer()); err != nil {
		return nil, err
	}
	nb.Cache().AddEventHandler(c.nbHandler())
	return c, nil
}

// Run waits for the caches, converges everything once (which also sweeps
// owned rows nobody wants), and then every change until ctx ends. Only the
// leader runs it.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	c.log.Info("waiting for informer caches")
	if err := controller.WaitSynced(ctx, c.synced...); err != nil {
		return err
	}
	c.EnqueueAll()
	if c.cfg.ResyncInterval > 0 {
		go wait.UntilWithContext(ctx, func(context.Context) { c.EnqueueAll() }, c.cfg.ResyncInterval)
	}
	c.log.Info("translation controller started")
	c.work.Run(ctx)
	c.log.Info("translation controller stopped")
	return nil
}

// EnqueueAll converges everything again, read from scratch (a resync, the
// end of a standoff).
func (c *Controller) EnqueueAll() { c.work.Add(allKey) }

// Stats returns the counters so far.
func (c *Controller) Stats() SyncStats {
	c.statsMu.Lock()
	st := c.stats
	c.statsMu.Unlock()
	st.Errors = c.work.Stats().Errors
	return st
}

// EgressIPStats returns the EgressIP rows' counters so far.
func (c *Controller) EgressIPStats() EgressIPStats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.eipStats
}

// EgressIPStandingBack reports whether the EgressIP rows stand back
// (ovn-kubernetes' own EgressIP serves pods in this NB).
func (c *Controller) EgressIPStandingBack() bool {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.eipStanding
}

// Idle reports whether no key waits or is being synced.
func (c *Controller) Idle() bool { return c.work.Idle() }

// Stuck returns an error when one sync has run longer than bound.
func (c *Controller) Stuck(bound time.Duration) error { return c.work.Stuck(bound) }

// Synced reports whether the controller's informers have synced.
func (c *Controller) Synced() bool { return controller.Synced(c.synced) }
