package master

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	egressscheme "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/scheme"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/nbsync"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Deployment modes of the master.
const (
	// ModeCentral: one NB holds every node; the master selects hosts and
	// translates.
	ModeCentral = "central"
	// ModeIC: interconnect, one NB per zone; the master only selects hosts,
	// and each node agent translates its own zone (RunZone).
	ModeIC = "ic"
	// ModeAuto detects the mode from the Nodes' annotations at start.
	ModeAuto = "auto"
)

// DetectMode tells interconnect from central by the Nodes' ovn-kubernetes
// annotations: a transit-switch address, or more than one zone name.
func DetectMode(ctx context.Context, kube kubernetes.Interface, joinSubnets []netip.Prefix) (string, error) {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list nodes to detect the mode: %w", err)
	}
	nodes := map[string]*translate.NodeInfo{}
	for i := range list.Items {
		nodes[list.Items[i].Name] = translate.ParseNode(&list.Items[i], joinSubnets)
	}
	if translate.Interconnect(nodes) {
		return ModeIC, nil
	}
	return ModeCentral, nil
}

// ZoneConfig configures the translation a node agent runs for its own
// interconnect zone, into that zone's NB.
type ZoneConfig struct {
	NB   ovn.ClientConfig
	Sync nbsync.Config
	// Node names the agent, for its Events' source.
	Node string
}

// RunZone translates the EgressServices of the cluster into the rows of
// one zone and converges the zone's NB on them until ctx ends. One runs per
// zone (next to the node agent), so no leader election.
func RunZone(ctx context.Context, cfg ZoneConfig, kube kubernetes.Interface, egress egressclient.Interface, log *logrus.Entry) error {
	if cfg.Sync.Zone == "" {
		return errors.New("zone translation needs a zone name")
	}
	if err := cfg.NB.Validate(); err != nil {
		return fmt.Errorf("zone nb: %w", err)
	}
	if cfg.Sync.EventReasons == nil {
		// Every zone sees the same service problems; only what is this
		// zone's own is worth an Event from it.
		cfg.Sync.EventReasons = map[translate.Reason]bool{translate.ReasonTransitAddressMissing: true}
	}
	nb, err := connectNB(ctx, cfg.NB, log)
	if err != nil {
		return err
	}
	defer nb.Close()
	eventScheme := runtime.NewScheme()
	if err := errors.Join(scheme.AddToScheme(eventScheme), egressscheme.AddToScheme(eventScheme)); err != nil {
		return err
	}
	bcast := record.NewBroadcaster(record.WithContext(ctx))
	defer bcast.Shutdown()
	bcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := bcast.NewRecorder(eventScheme, corev1.EventSource{Component: "ovn-egress-zone", Host: cfg.Node})
	det := coexist.New(coexist.Config{ReroutePriority: cfg.Sync.Translate.ReroutePriority}, nb,
		log.WithField("controller", "coexist").WithField("zone", cfg.Sync.Zone), recorder)
	cfg.Sync.Standoff = det
	kubeInf := informer.Kube(kube)
	egInf := informer.Egress(egress, det.ObserveEgressService)
	if err := watchConflicts(det, egInf); err != nil {
		return err
	}
	c, err := nbsync.New(cfg.Sync, log.WithField("controller", "nbsync").WithField("zone", cfg.Sync.Zone), nb, kubeInf, egInf, recorder)
	if err != nil {
		return err
	}
	det.OnChange(func(cf coexist.Conflict) {
		if !cf.Active() {
			c.EnqueueAll()
		}
	})
	go det.Run(ctx)
	kubeInf.Start(ctx.Done())
	egInf.Start(ctx.Done())
	defer kubeInf.Shutdown()
	defer egInf.Shutdown()
	return c.Run(ctx)
}
