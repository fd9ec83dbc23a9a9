// Package zone runs the translation of one interconnect zone: the node
// agent of a zone's node runs it next to its own work (ovn-egress node
// --zone), converging that zone's NB on the cluster's EgressServices and,
// with --egressip, its EgressIPs.
package zone

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/translation"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Config configures the translation a node agent runs for its own
// interconnect zone, into that zone's NB.
type Config struct {
	NB          ovn.ClientConfig
	Translation translation.Config
	// Node names the agent, for its Events' source.
	Node string
	// Observe, when set, gets the NB metrics and the zone's checks.
	Observe *observe.Server
	// ReportNamespace holds the node agents' report ConfigMaps.
	ReportNamespace string
	// EgressIP writes the zone's EgressIP rows too (Clients.EgressIP must be
	// set): the reroutes of its selected pods and the SNATs of its egress
	// nodes, beside the EgressServices' rows.
	EgressIP bool
	// ConflictClearAfter is how long a conflict with ovn-kubernetes must stay
	// gone before the zone resumes (coexist.DefaultClearAfter when 0).
	ConflictClearAfter time.Duration
	// Instance names this install: the zone's NB is claimed for it, and
	// another install's claim stands the zone back (coexist.Config).
	// Empty: no claim.
	Instance string
	// Relay, when set, is told the zone's conflicts (the node agent beside
	// the zone stands back while another install holds the zone's NB).
	Relay *coexist.Relay
}

// Clients are the API clients a zone's translation reads through.
type Clients struct {
	Kube   kubernetes.Interface
	Egress egressclient.Interface
	// EgressIP is needed only with Config.EgressIP.
	EgressIP eipclient.Interface
	// Informers, when set, are shared with the node agent beside the
	// translation (informer.Shared); otherwise it makes its own.
	Informers *informer.Shared
}

// Translator is one zone's translation, built and not yet running.
type Translator struct {
	cfg        Config
	log        *logrus.Entry
	nb         client.Client
	det        *coexist.Detector
	sync       *translation.Controller
	factories  []factory
	stopEvents func()
	verdict    *verdictPublisher
}

// factory is an informer factory: started by Run, shut down by Close.
type factory interface {
	Start(<-chan struct{})
	Shutdown()
}

// Run translates the EgressServices (and, with Config.EgressIP, the
// EgressIPs) of the cluster into the rows of one zone and converges the zone's NB on them until ctx ends. One runs per
// zone (next to the node agent), so no leader election.
func Run(ctx context.Context, cfg Config, c Clients, log *logrus.Entry) error {
	t, err := New(ctx, cfg, c, log)
	if err != nil {
		return err
	}
	defer t.Close()
	return t.Run(ctx)
}

// New connects to the zone's NB and wires the translation controller to
// the cluster's informers (not started until Run). Close releases it.
func New(ctx context.Context, cfg Config, c Clients, log *logrus.Entry) (*Translator, error) {
	if cfg.Translation.Zone == "" {
		return nil, errors.New("zone translation needs a zone name")
	}
	if cfg.ReportNamespace == "" {
		return nil, errors.New("zone translation needs the namespace of the readiness reports")
	}
	if cfg.EgressIP && c.EgressIP == nil {
		return nil, errors.New("zone translation of EgressIPs needs the EgressIP client")
	}
	if err := cfg.NB.Validate(); err != nil {
		return nil, fmt.Errorf("zone nb: %w", err)
	}
	if cfg.Translation.EventReasons == nil {
		// Every zone sees the same service problems; only what is this
		// zone's own is worth an Event from it.
		cfg.Translation.EventReasons = map[translate.Reason]bool{translate.ReasonTransitAddressMissing: true}
	}
	if cfg.Observe != nil {
		cfg.Observe.Ready("zone", func() error { return errors.New("connecting to the zone's NB") })
		cfg.Translation.NB = ovn.NewMetrics(cfg.Observe.Registry())
		cfg.NB.Registry = cfg.Observe.Registry()
	}
	nb, err := ovn.ConnectNB(ctx, cfg.NB, log)
	if err != nil {
		return nil, err
	}
	t := &Translator{cfg: cfg, log: log, nb: nb, stopEvents: func() {}}
	if err := t.wire(ctx, c); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Translator) wire(ctx context.Context, clients Clients) error {
	cfg, log, nb, kube := t.cfg, t.log, t.nb, clients.Kube
	if cfg.Observe != nil {
		cfg.Observe.Registry().MustRegister(ovn.NewConnectionCollector(nb))
	}
	recorder, stopEvents, err := controller.NewRecorder(ctx, kube, corev1.EventSource{Component: "ovn-egress-zone", Host: cfg.Node})
	if err != nil {
		return err
	}
	t.stopEvents = stopEvents
	t.det = coexist.New(coexist.Config{ReroutePriority: cfg.Translation.Translate.ReroutePriority, EgressIP: cfg.EgressIP, ClearAfter: cfg.ConflictClearAfter, Instance: cfg.Instance}, nb,
		log.WithField("controller", "coexist").WithField("zone", cfg.Translation.Zone), recorder)
	cfg.Translation.Standoff = t.det
	if cfg.Relay != nil {
		t.det.OnChange(cfg.Relay.Set)
	}
	// No status-writer holds here: the zone translates status.host as it
	// stands, whoever wrote it (only host selection writes it back).
	shared := clients.Informers
	if shared == nil {
		shared = informer.NewShared(kube, clients.Egress)
	}
	kubeInf, egInf := shared.Kube, shared.Egress
	repInf := informer.Reports(kube, cfg.ReportNamespace)
	t.factories = []factory{kubeInf, egInf, repInf}
	cfg.Translation.Reports = repInf.Core().V1().ConfigMaps()
	if cfg.EgressIP {
		eipInf := informer.EgressIP(clients.EgressIP)
		t.factories = append(t.factories, eipInf)
		cfg.Translation.EgressIP = &translation.EgressIPConfig{Informers: eipInf, Standoff: t.det}
	}
	if err := t.det.Watch(egInf.K8s().V1().EgressServices()); err != nil {
		return err
	}
	c, err := translation.New(cfg.Translation, log.WithField("controller", translation.Name).WithField("zone", cfg.Translation.Zone), nb, kubeInf, egInf, recorder)
	if err != nil {
		return err
	}
	t.sync = c
	t.verdict = newVerdictPublisher(kube, cfg.ReportNamespace, cfg.Node, log.WithField("controller", "zone-verdict"))
	t.det.OnChange(func(cf coexist.Conflict) {
		t.verdict.set(coexist.VerdictOf(cf))
		if !cf.Active() || cfg.EgressIP {
			c.EnqueueAll() // what was skipped meanwhile (the EgressIP rows follow their own standoff)
		}
	})
	if cfg.Observe != nil {
		cfg.Observe.Ready("zone", func() error {
			var errs []error
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := ovn.Reachable(ctx, nb); err != nil {
				errs = append(errs, fmt.Errorf("zone NB not connected: %w", err))
			}
			if !c.Synced() {
				errs = append(errs, errors.New("informer caches not synced"))
			}
			if cf := t.det.Conflict(); cf.Active() {
				errs = append(errs, fmt.Errorf("standing back, writing nothing: %s", cf))
			}
			if cf := t.det.Conflict(); cfg.EgressIP && cf.EgressIPActive() {
				errs = append(errs, fmt.Errorf("EgressIP standing back: %s", cf.EgressIPString()))
			}
			return errors.Join(errs...)
		})
		cfg.Observe.Live("zone", func() error { return c.Stuck(controller.StuckBound) })
	}
	return nil
}

// Translation is the zone's translation controller (for its Stats and Idle).
func (t *Translator) Translation() *translation.Controller { return t.sync }

// Run starts the informers and converges the zone's NB until ctx ends.
func (t *Translator) Run(ctx context.Context) error {
	go t.det.Run(ctx)
	go t.verdict.run(ctx)
	for _, f := range t.factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	return t.sync.Run(ctx)
}

// Close flushes the Events and closes the NB connection.
func (t *Translator) Close() {
	t.stopEvents()
	t.nb.Close()
}
