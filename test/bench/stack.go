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
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/nbsync"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// stackOpts configure an in-process master: the translation controller
// and, optionally, host selection, wired to shared informer factories
// exactly as pkg/k8s/master wires them (without the Lease), so the bench
// can time its phases and read its counters.
type stackOpts struct {
	kube     kubernetes.Interface
	egress   egressclient.Interface
	recorder record.EventRecorder
	nbAddr   string
	cfg      translate.Config
	batch    time.Duration
	resync   time.Duration
	// selection, when set, also runs host selection with this config.
	selection *selection.Config
}

// stack is a running in-process master.
type stack struct {
	nb      client.Client
	sync    *nbsync.Controller
	sel     *selection.Controller
	kubeInf kubeinformers.SharedInformerFactory
	egInf   egressinformers.SharedInformerFactory

	// started: the stack was asked to start; connected: NB monitor
	// complete; synced: every informer cache synced (the controllers start).
	started, connected, synced time.Time

	cancel context.CancelFunc
	done   chan error
	n      int
}

func startStack(ctx context.Context, o stackOpts, log *logrus.Entry) (*stack, error) {
	s := &stack{started: time.Now(), done: make(chan error, 2)}
	s.kubeInf = informer.Kube(o.kube)
	s.egInf = informer.Egress(o.egress)
	var err error
	if o.nbAddr != "" {
		s.nb, err = ovn.NewNBClient(ctx, ovn.ClientConfig{Addresses: []string{o.nbAddr}}, log.WithField("controller", "libovsdb"))
		if err != nil {
			return nil, err
		}
		s.connected = time.Now()
		cfg := nbsync.Config{Translate: o.cfg, BatchWindow: o.batch, ResyncInterval: o.resync}
		s.sync, err = nbsync.New(cfg, log.WithField("controller", "nbsync"), s.nb, s.kubeInf, s.egInf, o.recorder)
	}
	if err == nil && o.selection != nil {
		sc := *o.selection
		sc.ClusterSubnets = o.cfg.ClusterSubnets
		s.sel, err = selection.New(sc, log.WithField("controller", "selection"), o.kube, o.egress, s.kubeInf, s.egInf, o.recorder)
	}
	if err != nil {
		if s.nb != nil {
			s.nb.Close()
		}
		return nil, fmt.Errorf("build controllers: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.kubeInf.Start(cctx.Done())
	s.egInf.Start(cctx.Done())
	for t, ok := range s.kubeInf.WaitForCacheSync(cctx.Done()) {
		if !ok {
			s.stop()
			return nil, fmt.Errorf("informer %v did not sync", t)
		}
	}
	for t, ok := range s.egInf.WaitForCacheSync(cctx.Done()) {
		if !ok {
			s.stop()
			return nil, fmt.Errorf("informer %v did not sync", t)
		}
	}
	s.synced = time.Now()
	if s.sync != nil {
		s.n++
		go func() { s.done <- s.sync.Run(cctx) }()
	}
	if s.sel != nil {
		s.n++
		go func() { s.done <- s.sel.Run(cctx) }()
	}
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
	var errs []error
	for i := 0; i < s.n; i++ {
		if err := <-s.done; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	s.kubeInf.Shutdown()
	s.egInf.Shutdown()
	if s.nb != nil {
		s.nb.Close()
	}
	return errors.Join(errs...)
}

// apiRecorder posts Events to the API server as the master's recorder
// does; stop flushes it.
func apiRecorder(ctx context.Context, kube kubernetes.Interface) (record.EventRecorder, func(), error) {
	return controller.NewRecorder(ctx, kube, corev1.EventSource{Component: "ovn-egress-master"})
}
