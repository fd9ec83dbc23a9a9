// Package master runs ovn-egress's master: one active replica, chosen by a
// coordination.k8s.io Lease, runs the controllers (host selection and NB
// translation); standbys keep warm informer caches and an NB connection and
// take over when the Lease expires.
package master

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	eipinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/informers/externalversions"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/egressip"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/status"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
)

// LeaderElection configures the Lease.
type LeaderElection struct {
	Enabled       bool
	Namespace     string
	Name          string
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Config is the master's configuration.
type Config struct {
	// Mode is ModeCentral, ModeIC or ModeAuto (default: central).
	Mode        string
	NB          ovn.ClientConfig
	Translation translation.Config
	// Select configures host selection; its ClusterSubnets and
	// UnassignedTraffic are always taken from Translation.Translate.
	Select         selection.Config
	LeaderElection LeaderElection
	// ReportNamespace holds the node agents' readiness-report ConfigMaps
	// (the agents' namespace; default DefaultReportNamespace).
	ReportNamespace string
	// Controllers names the controllers to run (ControllerSelection,
	// ControllerTranslation, ControllerStatus, ControllerEgressIP); empty:
	// selection, translation and status, every one the mode has.
	// Translation exists only with a central NB; the EgressIP controller
	// runs only when named.
	Controllers []string
	// Observe, when set, gets the master's metrics and health checks.
	Observe *observe.Server
	// StatusHold is how long a status.host written by a foreign field
	// manager holds its EgressService (coexist.DefaultHold when 0).
	StatusHold time.Duration
	// ConflictClearAfter is how long a conflict with ovn-kubernetes must stay
	// gone before the master resumes (coexist.DefaultClearAfter when 0).
	ConflictClearAfter time.Duration
	// Instance names this install: a central master claims its NB for it
	// and stands back from an NB another install claimed (coexist.Config).
	// Empty: no claim.
	Instance string
}

// DefaultReportNamespace is where the manifests run the node agents.
const DefaultReportNamespace = "ovn-egress"

// The master's controllers, as Config.Controllers names them.
const (
	ControllerSelection   = "selection"
	ControllerTranslation = "translation"
	// ControllerStatus writes the EgressServices' status.conditions.
	ControllerStatus = "status"
)

// Validate checks the configuration, its unset fields taken as their
// defaults (withDefaults). It changes nothing.
func (c Config) Validate() error { return c.withDefaults().validate(true) }

// withDefaults returns c with the default of each unset field: the central
// mode, the report namespace, a leader-election identity, and its
// controllers' own defaults.
func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeCentral
	}
	if c.ReportNamespace == "" {
		c.ReportNamespace = DefaultReportNamespace
	}
	if le := &c.LeaderElection; le.Enabled && le.Identity == "" {
		h, _ := os.Hostname()
		le.Identity = fmt.Sprintf("%s_%d", h, os.Getpid())
	}
	c.Translation, c.Select = c.Translation.WithDefaults(), c.Select.WithDefaults()
	return c
}

// selection is host selection's configuration: its own, with the networks
// and the unassigned-traffic policy of the translation (one truth for
// both, given once).
func (c Config) selection() selection.Config {
	s := c.Select
	s.ClusterSubnets = c.Translation.Translate.ClusterSubnets
	s.JoinSubnets, s.ServiceCIDRs = c.Translation.Translate.JoinSubnets, c.Translation.Translate.ServiceCIDRs
	s.UnassignedTraffic = c.Translation.Translate.UnassignedTraffic
	return s
}

// checkControllers checks Config.Controllers against the resolved mode.
func (c *Config) checkControllers() error {
	for _, n := range c.Controllers {
		switch n {
		case ControllerSelection, ControllerStatus, ControllerEgressIP:
		case ControllerTranslation:
			if c.Mode != ModeCentral {
				return fmt.Errorf("controller %q needs the central mode: in interconnect each node agent translates its zone", n)
			}
		default:
			return fmt.Errorf("unknown controller %q (want %s, %s, %s or %s)", n, ControllerSelection, ControllerTranslation, ControllerStatus, ControllerEgressIP)
		}
	}
	return nil
}

// runs reports whether the controller named n is to run.
func (c *Config) runs(n string) bool {
	return (len(c.Controllers) == 0 && n != ControllerEgressIP) || slices.Contains(c.Controllers, n)
}

// validate checks a configuration whose defaults are filled; needNB: the
// NB client is the master's to make.
func (c Config) validate(needNB bool) error {
	switch c.Mode {
	case ModeCentral, ModeIC, ModeAuto:
	default:
		return fmt.Errorf("unknown mode %q (want central, ic or auto)", c.Mode)
	}
	// Interconnect needs no NB (each zone's agent writes its own); auto
	// checks it once the mode is known.
	if c.Mode == ModeCentral && needNB {
		if err := c.NB.Validate(); err != nil {
			return fmt.Errorf("nb: %w", err)
		}
	}
	if c.Mode != ModeAuto { // auto: checked once the mode is known
		if err := c.checkControllers(); err != nil {
			return err
		}
	}
	if err := c.Translation.Validate(); err != nil {
		return err
	}
	if err := c.selection().Validate(); err != nil {
		return fmt.Errorf("host selection: %w", err)
	}
	le := &c.LeaderElection
	if le.Enabled {
		if le.Namespace == "" || le.Name == "" {
			return fmt.Errorf("leader election needs a lease namespace and name")
		}
		if le.LeaseDuration <= le.RenewDeadline || le.RenewDeadline <= le.RetryPeriod || le.RetryPeriod <= 0 {
			return fmt.Errorf("leader election durations must satisfy lease > renew deadline > retry period > 0")
		}
	}
	return nil
}

// Master is a running master process.
type Master struct {
	cfg     Config
	log     *logrus.Entry
	kube    kubernetes.Interface
	egress  egressclient.Interface
	nb      client.Client
	sync    *translation.Controller
	sel     *selection.Controller
	status  *status.Controller   // nil when Config.Controllers leaves it out
	eip     *egressip.Controller // nil unless Config.Controllers names it
	kubeInf kubeinformers.SharedInformerFactory
	egInf   egressinformers.SharedInformerFactory
	repInf  kubeinformers.SharedInformerFactory // the report ConfigMaps (translation only)
	eipInf  eipinformers.SharedInformerFactory  // EgressIPs (the egressip controller only)
	closeNB bool                                // the master made nb (New) and closes it
	// stopEvents flushes and stops the Event recorder the master made.
	stopEvents func()
	coexist    *coexist.Detector
	leader     prometheus.Gauge // nil without metrics
}

// Clients are the ready connections a master works through: the API
// server's clients and, with one central NB, its client (nil: interconnect,
// the master only selects hosts). Recorder is optional: without one the
// master posts Events through Kube. Dynamic, when set, reads MetalLB's
// ServiceL2Statuses where the API serves them (ControllerStatus).
type Clients struct {
	Kube     kubernetes.Interface
	Egress   egressclient.Interface
	EgressIP eipclient.Interface // needed only by ControllerEgressIP
	Dynamic  dynamic.Interface
	NB       client.Client
	Recorder record.EventRecorder
}

// New connects to the API server and NB (retrying NB until ctx ends) and
// builds the controllers; nothing runs until Run.
func New(ctx context.Context, cfg Config, rc *rest.Config, log *logrus.Entry) (*Master, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	egress, err := egressclient.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("egressservice client: %w", err)
	}
	eip, err := eipclient.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("egressip client: %w", err)
	}
	if cfg.Mode == ModeAuto {
		if cfg.Mode, err = DetectMode(ctx, kube, cfg.Translation.Translate.JoinSubnets); err != nil {
			return nil, err
		}
		log.WithField("mode", cfg.Mode).Info("detected the deployment from the nodes' annotations")
		if cfg.Mode == ModeCentral {
			if err := cfg.NB.Validate(); err != nil {
				return nil, fmt.Errorf("central mode needs the NB: %w", err)
			}
		}
	}
	if err := cfg.checkControllers(); err != nil {
		return nil, err
	}
	leader := instrument(&cfg, cfg.Observe) // before the NB client: it registers its metrics
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	cl := Clients{Kube: kube, Egress: egress, EgressIP: eip, Dynamic: dyn}
	if cfg.Mode == ModeCentral {
		if cl.NB, err = ovn.ConnectNB(ctx, cfg.NB, log); err != nil {
			return nil, err
		}
	} else {
		log.Info("interconnect: selecting hosts only; each node agent translates its own zone")
	}
	m, err := build(ctx, cfg, cl, leader, log)
	if err != nil {
		if cl.NB != nil {
			cl.NB.Close()
		}
		return nil, err
	}
	m.closeNB = cl.NB != nil
	return m, nil
}

// NewFromClients builds a master on connections the caller made and keeps
// owning (an NB client is not closed by Run): the mode follows cl.NB.
// Benchmarks and embedders use it; the process uses New.
func NewFromClients(ctx context.Context, cfg Config, cl Clients, log *logrus.Entry) (*Master, error) {
	cfg.Mode = ModeIC
	if cl.NB != nil {
		cfg.Mode = ModeCentral
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	return build(ctx, cfg, cl, instrument(&cfg, cfg.Observe), log)
}

// build wires the controllers of cfg.Controllers on shared informers.
func build(ctx context.Context, cfg Config, cl Clients, leader prometheus.Gauge, log *logrus.Entry) (*Master, error) {
	observeNB(cfg.Observe, cl.NB)
	recorder, stopEvents := cl.Recorder, func() {}
	if recorder == nil {
		var err error
		if recorder, stopEvents, err = controller.NewRecorder(ctx, cl.Kube, corev1.EventSource{Component: "ovn-egress-master"}); err != nil {
			return nil, err
		}
	}
	det := coexist.New(coexist.Config{ReroutePriority: cfg.Translation.Translate.ReroutePriority, Central: cfg.Mode == ModeCentral,
		EgressIP: cfg.runs(ControllerEgressIP), HoldWriters: cfg.runs(ControllerSelection), Hold: cfg.StatusHold, ClearAfter: cfg.ConflictClearAfter, Instance: cfg.Instance},
		cl.NB, log.WithField("controller", "coexist"), recorder)
	cfg.Translation.Standoff, cfg.Select.Standoff = det, det
	if cfg.runs(ControllerTranslation) && cfg.runs(ControllerSelection) {
		// Translation waits while selection writes a drain's status.host
		// (one sync repoints it all, not one per echo).
		moves := &controller.Gate{}
		cfg.Translation.HostMoves, cfg.Select.HostMoves = moves, moves
	}
	m := &Master{cfg: cfg, log: log, kube: cl.Kube, egress: cl.Egress, nb: cl.NB, stopEvents: stopEvents, coexist: det, leader: leader,
		kubeInf: informer.Kube(cl.Kube),
		egInf:   informer.Egress(cl.Egress, det.ObserveEgressService)}
	err := det.Watch(m.egInf.K8s().V1().EgressServices())
	if err == nil && cfg.runs(ControllerEgressIP) {
		if cl.EgressIP == nil {
			err = fmt.Errorf("controller %q needs the EgressIP client", ControllerEgressIP)
		} else {
			m.eipInf = informer.EgressIP(cl.EgressIP)
		}
	}
	if err == nil && cl.NB != nil && cfg.runs(ControllerTranslation) {
		m.repInf = informer.Reports(cl.Kube, cfg.ReportNamespace)
		cfg.Translation.Reports = m.repInf.Core().V1().ConfigMaps()
		if m.eipInf != nil {
			// The EgressIPs' rows: in the same NB transactions as the
			// EgressServices'.
			cfg.Translation.EgressIP = &translation.EgressIPConfig{Informers: m.eipInf, Standoff: det}
		}
		m.sync, err = translation.New(cfg.Translation, log.WithField("controller", translation.Name), cl.NB, m.kubeInf, m.egInf, recorder)
	}
	if err == nil && cl.NB == nil {
		// An interconnect master has no NB: the zones' verdicts, in the
		// node agents' reports, say what ovn-kubernetes has in theirs.
		m.repInf = informer.Reports(cl.Kube, cfg.ReportNamespace)
		err = det.WatchReports(m.repInf.Core().V1().ConfigMaps())
	}
	if err == nil && cfg.runs(ControllerStatus) {
		err = m.buildStatus(cfg, cl, log)
	}
	if err == nil && cfg.runs(ControllerSelection) {
		m.probeEgressNodes(&cfg)
		if m.status != nil {
			cfg.Select.ProblemsChanged = m.status.Enqueue
		}
		m.sel, err = selection.New(cfg.selection(), log.WithField("controller", "selection"), cl.Kube, cl.Egress, m.kubeInf, m.egInf, recorder)
	}
	if err == nil {
		err = m.buildEgressIP(cfg, cl.EgressIP, cl.NB, log, recorder)
	}
	if err != nil {
		stopEvents()
		return nil, err
	}
	det.OnChange(func(c coexist.Conflict) {
		if m.status != nil {
			m.status.EnqueueAll() // every Ready says when the master stands back, and when no longer
		}
		if c.Active() {
			return
		}
		// The standoff is over, a hold began or ended, the EgressIP
		// standoff changed: converge everything skipped meanwhile.
		for _, ctl := range m.controllers() {
			ctl.EnqueueAll()
		}
	})
	m.checks(cfg.Observe)
	return m, nil
}

// Run starts the informers, waits for leadership (if enabled) and runs the
// controllers until ctx ends or leadership is lost (an error: the process
// must restart to become a clean standby).
func (m *Master) Run(ctx context.Context) error {
	if m.closeNB {
		defer m.nb.Close()
	}
	defer m.stopEvents()
	defer m.kubeInf.Shutdown()
	defer m.egInf.Shutdown()
	if m.repInf != nil {
		defer m.repInf.Shutdown()
	}
	if m.eipInf != nil {
		defer m.eipInf.Shutdown()
	}
	// Shutdown waits for the informers, which stop only when their context
	// does: cancel it first (deferred last), also when Run returns because
	// the Lease was lost and the process's own context is still alive —
	// else the replica hangs there and is never replaced (chaos soak).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.kubeInf.Start(ctx.Done())
	m.egInf.Start(ctx.Done())
	if m.repInf != nil {
		m.repInf.Start(ctx.Done())
	}
	if m.eipInf != nil {
		m.eipInf.Start(ctx.Done())
	}
	if !m.cfg.LeaderElection.Enabled {
		return m.lead(ctx)
	}
	le := m.cfg.LeaderElection
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     m.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	// The controllers run on this goroutine, not in the elector's callback
	// goroutine: Run returns only after they stopped, and when they fail
	// the elector is stopped too (the Lease is released, not held by a
	// replica that no longer works).
	started := make(chan context.Context, 1)
	lost := false
	ectx, stopElector := context.WithCancel(ctx)
	defer stopElector()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: "ovn-egress-master",
		LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				m.log.WithField("identity", le.Identity).Info("became leader")
				started <- lctx
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(id string) {
				if id != le.Identity {
					m.log.WithField("leader", id).Info("standing by")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		elector.Run(ectx)
	}()
	var runErr error
	select {
	case lctx := <-started:
		runErr = m.lead(lctx)
		stopElector()
		// Releasing the Lease is an API write without a deadline; with the
		// API server or etcd away it hung the process for up to a minute
		// after it had lost the Lease (found by the chaos soak), so that
		// no replacement started. A replica exits regardless; an
		// unreleased Lease expires.
		select {
		case <-done:
		case <-time.After(le.RenewDeadline):
			m.log.Warn("the Lease could not be released in time (the API server does not answer); it will expire")
		}
	case <-done:
	}
	if runErr != nil {
		return runErr
	}
	if lost {
		return fmt.Errorf("lost the leader lease %s/%s", le.Namespace, le.Name)
	}
	return nil
}

// lead runs both controllers while this replica leads: host selection and
// translation. When ctx ends, or either controller returns (an error, or
// nil before ctx ended), both are stopped; lead returns once both have.
func (m *Master) lead(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.setLeader(true)
	defer m.setLeader(false)
	go m.coexist.Run(ctx) // logs, Events and the standoff's end as they happen
	var runs []func(context.Context) error
	for _, ctl := range m.controllers() {
		runs = append(runs, ctl.Run)
	}
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(ctx) }()
	}
	errs := []error{<-done}
	cancel()
	for range runs[1:] {
		errs = append(errs, <-done)
	}
	return errors.Join(errs...)
}

// Mode is the deployment mode the master runs in (auto resolved).
func (m *Master) Mode() string { return m.cfg.Mode }

// runner is what lead, the readiness check and the standoff's end need of
// each controller.
type runner interface {
	Run(context.Context) error
	EnqueueAll()
	Synced() bool
	Stuck(time.Duration) error
}

// controllers are the controllers this master runs.
func (m *Master) controllers() []runner {
	var out []runner
	if m.sel != nil {
		out = append(out, m.sel)
	}
	if m.sync != nil {
		out = append(out, m.sync)
	}
	if m.status != nil {
		out = append(out, m.status)
	}
	if m.eip != nil {
		out = append(out, m.eip)
	}
	return out
}

// Synced reports whether every controller's informer caches have synced.
func (m *Master) Synced() bool {
	for _, ctl := range m.controllers() {
		if !ctl.Synced() {
			return false
		}
	}
	return true
}

// Translation exposes the translation controller (tests and benchmarks); nil in
// interconnect mode or when it is not among Config.Controllers.
func (m *Master) Translation() *translation.Controller { return m.sync }

// Conflict is the state of the coexistence check with ovn-kubernetes.
func (m *Master) Conflict() coexist.Conflict { return m.coexist.Conflict() }

// Informers are the master's shared informer factories (tests and
// benchmarks read its caches and watch what it watches).
func (m *Master) Informers() (kubeinformers.SharedInformerFactory, egressinformers.SharedInformerFactory) {
	return m.kubeInf, m.egInf
}

// Status exposes the status controller (tests); nil when it is not among
// Config.Controllers.
func (m *Master) Status() *status.Controller { return m.status }

// Select exposes the host-selection controller (tests and benchmarks); nil
// when it is not among Config.Controllers.
func (m *Master) Select() *selection.Controller { return m.sel }
