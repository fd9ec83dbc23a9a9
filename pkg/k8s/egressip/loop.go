package egressip

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
)

// oneKey is what both controllers of the package share: a worker on their
// one key (all; the rows controller also syncs single EgressIPs by name),
// the informers it waits for, and what the master asks of a
// controller (run, enqueue, readiness, liveness).
type oneKey struct {
	what   string // "egress IP assignment", "egress IP rows": the log lines
	log    *logrus.Entry
	work   *controller.Worker[string]
	synced []cache.InformerSynced
	resync time.Duration // 0: no periodic sync
}

// newOneKey builds the loop; maxBatch bounds the keys one sync gets (the
// rows controller also syncs EgressIPs by name).
func newOneKey(what, name string, maxBatch int, log *logrus.Entry, m *controller.Metrics, sync controller.SyncFunc[string], synced []cache.InformerSynced) oneKey {
	return oneKey{what: what, log: log, synced: synced,
		work: controller.New(controller.Config[string]{Name: name, MaxBatch: maxBatch, Metrics: m}, sync, log)}
}

// enqueue is the handlers' only action.
func (o *oneKey) enqueue() { o.work.Add(all) }

// EnqueueAll asks for a sync (the master's standoff end calls it).
func (o *oneKey) EnqueueAll() { o.enqueue() }

// Synced reports whether the informer caches have synced (readiness).
func (o *oneKey) Synced() bool { return controller.Synced(o.synced) }

// Stuck reports a sync running for longer than bound (liveness).
func (o *oneKey) Stuck(bound time.Duration) error { return o.work.Stuck(bound) }

// Idle reports whether nothing waits or is being synced.
func (o *oneKey) Idle() bool { return o.work.Idle() }

// Run waits for the caches and converges until ctx ends.
func (o *oneKey) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	if err := controller.WaitSynced(ctx, o.synced...); err != nil {
		return err
	}
	o.enqueue()
	if o.resync > 0 {
		go wait.UntilWithContext(ctx, func(context.Context) { o.enqueue() }, o.resync)
	}
	o.log.Info(o.what + " started")
	o.work.Run(ctx)
	o.log.Info(o.what + " stopped")
	return nil
}
