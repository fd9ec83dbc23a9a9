package zone

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// verdictRecheck is how often the published verdict is read back and put
// right (the report ConfigMap may not exist yet when the verdict changes,
// or someone may have edited it).
const verdictRecheck = 30 * time.Second

// verdictPublisher keeps the zone's verdict (what of ovn-kubernetes its NB
// holds) in the first part of its node's report, under
// coexist.ReportVerdictKey: the interconnect master, which has no NB,
// stands back by the zones' verdicts. The node agent creates that
// ConfigMap; the publisher only patches its own key.
type verdictPublisher struct {
	kube      kubernetes.Interface
	namespace string
	node      string
	log       *logrus.Entry

	mu      sync.Mutex
	want    string
	changed chan struct{}
}

func newVerdictPublisher(kube kubernetes.Interface, namespace, node string, log *logrus.Entry) *verdictPublisher {
	return &verdictPublisher{kube: kube, namespace: namespace, node: node, log: log, changed: make(chan struct{}, 1)}
}

// set records the verdict to publish.
func (p *verdictPublisher) set(v coexist.ZoneVerdict) {
	p.mu.Lock()
	same := p.want == v.Encode()
	p.want = v.Encode()
	p.mu.Unlock()
	if !same {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// run publishes on every change, and reads back every verdictRecheck
// (every second while the last attempt failed), until ctx ends.
func (p *verdictPublisher) run(ctx context.Context) {
	wait := verdictRecheck
	for {
		if err := p.publish(ctx); err != nil {
			p.log.WithError(err).Debug("zone verdict not published yet")
			wait = time.Second
		} else {
			wait = verdictRecheck
		}
		select {
		case <-ctx.Done():
			return
		case <-p.changed:
		case <-time.After(wait):
		}
	}
}

// publish patches the verdict key when the report holds another value.
func (p *verdictPublisher) publish(ctx context.Context) error {
	name, err := translate.ReportConfigMapName(p.node)
	if err != nil {
		return err
	}
	cm, err := p.kube.CoreV1().ConfigMaps(p.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && p.current() == "" {
		return nil // nothing to say, and nowhere yet to say it
	}
	if err != nil {
		return err
	}
	want := p.current()
	if cm.Data[coexist.ReportVerdictKey] == want {
		return nil
	}
	var val any // null removes the key
	if want != "" {
		val = want
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]any{coexist.ReportVerdictKey: val}})
	if err != nil {
		return err
	}
	_, err = p.kube.CoreV1().ConfigMaps(p.namespace).Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "ovn-egress-zone"})
	if err == nil {
		p.log.WithField("verdict", want).Info("zone verdict published")
	}
	return err
}

func (p *verdictPublisher) current() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.want
}
