package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// stackOpts configure an in-process master (master.NewFromClients, without
// the Lease): with an NB address the translation controller runs, with a
// selection config host selection does; both: the central master.
type stackOpts struct {
	kube     kubernetes.Interface
	egress   egressclient.Interface
	recorder record.EventRecorder
	nbAddr   string
	cfg      translate.Config
	batch    time.Duration
	resync   time.Duration
	// hostMoves is the translation controller's HostMovesBound (0: the default).
	hostMoves time.Duration
	// selection, when set, also runs host selection with this config.
	selection *selection.Config
	// controllers, when set, are the master's controllers instead of those
	// the fields above imply; eip is the EgressIP client they may need.
	controllers []string
	eip         eipclient.Interface
}

// stack is a running in-process master.
type stack struct {
	nb      client.Client
	m       *master.Master
	sync    *translation.Controller
	sel     *selection.Controller
	kubeInf kubeinformers.SharedInformerFactory
	egInf   egressinformers.SharedInformerFactory

	// started: the stack was asked to start; connected: NB monitor
	// complete; synced: every informer cache synced (the controllers start).
	started, connected, synced time.Time

	cancel context.CancelFunc
	done   chan error
}

func startStack(ctx context.Context, o stackOpts, log *logrus.Entry) (*stack, error) {
	s := &stack{started: time.Now(), done: make(chan error, 1)}
	cfg := master.Config{Translation: translation.Config{Translate: o.cfg, BatchWindow: o.batch, ResyncInterval: o.resync, HostMovesBound: o.hostMoves},
		Select: selection.DefaultConfig()}
	if o.selection != nil {
		cfg.Select = *o.selection
		cfg.Controllers = append(cfg.Controllers, master.ControllerSelection)
	}
	var err error
	if o.nbAddr != "" {
		if s.nb, err = ovn.NewNBClient(ctx, ovn.ClientConfig{Addresses: []string{o.nbAddr}}, log.WithField("controller", "libovsdb")); err != nil {
			return nil, err
		}
		s.connected = time.Now()
		cfg.Controllers = append(cfg.Controllers, master.ControllerTranslation)
	}
	if o.controllers != nil {
		cfg.Controllers = o.controllers
	}
	s.m, err = master.NewFromClients(ctx, cfg, master.Clients{Kube: o.kube, Egress: o.egress, EgressIP: o.eip, NB: s.nb, Recorder: o.recorder}, log)
	if err != nil {
		if s.nb != nil {
			s.nb.Close()
		}
		return nil, fmt.Errorf("build the master: %w", err)
	}
	s.sync, s.sel = s.m.Translation(), s.m.Select()
	s.kubeInf, s.egInf = s.m.Informers()
	cctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	go func() { s.done <- s.m.Run(cctx) }()
	for !s.m.Synced() {
		select {
		case err := <-s.done:
			s.done <- err
			_ = s.stop()
			return nil, fmt.Errorf("the master stopped before its caches synced: %w", err)
		case <-time.After(time.Millisecond):
		}
	}
	s.synced = time.Now()
	return s, nil
}

// idle reports whether no controller has work queued or in flight.
func (s *stack) idle() bool {
	return (s.sync == nil || s.sync.Idle()) && (s.sel == nil || s.sel.Idle())
}

// waitConverged waits until the translation controller has synced at
// least once and every controller is idle, polling every millisecond.
func (s *stack) waitConverged(ctx context.Context) (time.Time, error) {
	for {
		if s.sync.Stats().Syncs > 0 && s.idle() {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for the master to converge: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (s *stack) stop() error {
	s.cancel()
	err := <-s.done
	if s.nb != nil {
		s.nb.Close()
	}
	return notCanceled(err)
}

// notCanceled drops the controllers' context.Canceled from err (a joined
// error keeps its other parts).
func notCanceled(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range j.Unwrap() {
			if e = notCanceled(e); e != nil {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// apiRecorder posts Events to the API server as the master's recorder
// does; stop flushes it.
func apiRecorder(ctx context.Context, kube kubernetes.Interface) (record.EventRecorder, func(), error) {
	return controller.NewRecorder(ctx, kube, corev1.EventSource{Component: "ovn-egress-master"})
}
