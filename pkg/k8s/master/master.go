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
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/nbsync"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
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
	Mode string
	NB   ovn.ClientConfig
	Sync nbsync.Config
	// Select configures host selection; its ClusterSubnets and
	// UnassignedTraffic are always taken from Sync.Translate.
	Select         selection.Config
	LeaderElection LeaderElection
	// Observe, when set, gets the master's metrics and health checks.
	Observe *observe.Server
}

// Validate checks the configuration and fills defaults.
func (c *Config) Validate() error {
	switch c.Mode {
	case "":
		c.Mode = ModeCentral
	case ModeCentral, ModeIC, ModeAuto:
	default:
		return fmt.Errorf("unknown mode %q (want central, ic or auto)", c.Mode)
	}
	// Interconnect needs no NB (each zone's agent writes its own); auto
	// checks it once the mode is known.
	if c.Mode == ModeCentral {
		if err := c.NB.Validate(); err != nil {
			return fmt.Errorf("nb: %w", err)
		}
	}
	if err := c.Sync.Validate(); err != nil {
		return err
	}
	c.Select.ClusterSubnets = c.Sync.Translate.ClusterSubnets
	c.Select.UnassignedTraffic = c.Sync.Translate.UnassignedTraffic
	if err := c.Select.Validate(); err != nil {
		return fmt.Errorf("host selection: %w", err)
	}
	le := &c.LeaderElection
	if le.Enabled {
		if le.Namespace == "" || le.Name == "" {
			return fmt.Errorf("leader election needs a lease namespace and name")
		}
		if le.Identity == "" {
			h, _ := os.Hostname()
			le.Identity = fmt.Sprintf("%s_%d", h, os.Getpid())
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
	sync    *nbsync.Controller
	sel     *selection.Controller
	kubeInf kubeinformers.SharedInformerFactory
	egInf   egressinformers.SharedInformerFactory
	// stopEvents flushes and stops the Event recorder.
	stopEvents func()
	coexist    *coexist.Detector
	leader     prometheus.Gauge // nil without metrics
}

// New connects to the API server and NB (retrying NB until ctx ends) and
// builds the controllers; nothing runs until Run.
func New(ctx context.Context, cfg Config, rc *rest.Config, log *logrus.Entry) (*Master, error) {
	if err := cfg.Validate(); err != nil {
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
	if cfg.Mode == ModeAuto {
		if cfg.Mode, err = DetectMode(ctx, kube, cfg.Sync.Translate.JoinSubnets); err != nil {
			return nil, err
		}
		log.WithField("mode", cfg.Mode).Info("detected the deployment from the nodes' annotations")
		if cfg.Mode == ModeCentral {
			if err := cfg.NB.Validate(); err != nil {
				return nil, fmt.Errorf("central mode needs the NB: %w", err)
			}
		}
	}
	leader := instrument(&cfg, cfg.Observe)
	var nb client.Client
	if cfg.Mode == ModeCentral {
		if nb, err = ovn.ConnectNB(ctx, cfg.NB, log); err != nil {
			return nil, err
		}
		observeNB(cfg.Observe, nb)
	} else {
		log.Info("interconnect: selecting hosts only; each node agent translates its own zone")
	}
	closeNB := func() {
		if nb != nil {
			nb.Close()
		}
	}
	recorder, stopEvents, err := controller.NewRecorder(ctx, kube, corev1.EventSource{Component: "ovn-egress-master"})
	if err != nil {
		closeNB()
		return nil, err
	}
	det := coexist.New(coexist.Config{ReroutePriority: cfg.Sync.Translate.ReroutePriority, Central: cfg.Mode == ModeCentral},
		nb, log.WithField("controller", "coexist"), recorder)
	cfg.Sync.Standoff, cfg.Select.Standoff = det, det
	m := &Master{cfg: cfg, log: log, kube: kube, egress: egress, nb: nb, stopEvents: stopEvents, coexist: det, leader: leader,
		kubeInf: informer.Kube(kube),
		egInf:   informer.Egress(egress, det.ObserveEgressService)}
	if err := det.Watch(m.egInf.K8s().V1().EgressServices()); err != nil {
		closeNB()
		return nil, err
	}
	if nb != nil {
		m.sync, err = nbsync.New(cfg.Sync, log.WithField("controller", "nbsync"), nb, m.kubeInf, m.egInf, recorder)
	}
	if err == nil {
		m.sel, err = selection.New(cfg.Select, log.WithField("controller", "selection"), kube, egress, m.kubeInf, m.egInf, recorder)
	}
	if err != nil {
		closeNB()
		return nil, err
	}
	det.OnChange(func(c coexist.Conflict) {
		if c.Active() {
			return
		}
		// The standoff is over: converge everything skipped meanwhile.
		if m.sync != nil {
			m.sync.EnqueueAll()
		}
		m.sel.EnqueueAll()
	})
	m.checks(cfg.Observe)
	return m, nil
}

// Run starts the informers, waits for leadership (if enabled) and runs the
// controllers until ctx ends or leadership is lost (an error: the process
// must restart to become a clean standby).
func (m *Master) Run(ctx context.Context) error {
	if m.nb != nil {
		defer m.nb.Close()
	}
	defer m.stopEvents()
	m.kubeInf.Start(ctx.Done())
	m.egInf.Start(ctx.Done())
	defer m.kubeInf.Shutdown()
	defer m.egInf.Shutdown()
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
		<-done
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
	runs := []func(context.Context) error{m.sel.Run}
	if m.sync != nil {
		runs = append(runs, m.sync.Run)
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
func (m *Master) Mode() string {
	if m.sync == nil {
		return ModeIC
	}
	return ModeCentral
}

// Sync exposes the translation controller (tests and benchmarks); nil in
// interconnect mode.
func (m *Master) Sync() *nbsync.Controller { return m.sync }

// Conflict is the state of the coexistence check with ovn-kubernetes.
func (m *Master) Conflict() coexist.Conflict { return m.coexist.Conflict() }

// Select exposes the host-selection controller (tests and benchmarks).
func (m *Master) Select() *selection.Controller { return m.sel }
