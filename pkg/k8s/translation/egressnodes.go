package translation

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/informers/externalversions/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
)

// watchEgressNodes follows the nodes holding EgressIPs (a zone's, with
// Config.EgressIP):
// a node that starts or stops holding one has its key synced, so that its
// zone's cluster route follows.
func (c *Controller) watchEgressNodes(inf eipinformers.EgressIPInformer) error {
	c.es.eipLister = inf.Lister()
	_, err := inf.Informer().AddEventHandler(controller.OnChange(func(old, obj any) {
		o, _ := controller.As[*egressipv1.EgressIP](old)
		n, _ := controller.As[*egressipv1.EgressIP](obj)
		if a, b := itemNodes(o), itemNodes(n); !slices.Equal(a, b) {
			for _, node := range append(a, b...) {
				c.work.Add(nodeRowsKey(node))
			}
		}
	}))
	if err != nil {
		return fmt.Errorf("egressip handler: %w", err)
	}
	return nil
}

// egressNodes are the nodes holding an IP of some EgressIP (nil without
// watchEgressNodes).
func (e *egressServices) egressNodes() (map[string]bool, error) {
	if e.eipLister == nil {
		return nil, nil
	}
	list, err := e.eipLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return egressip.EgressIPNodes(list), nil
}

// itemNodes are the nodes of an EgressIP's status.items, sorted.
func itemNodes(e *egressipv1.EgressIP) []string {
	if e == nil {
		return nil
	}
	out := make([]string, 0, len(e.Status.Items))
	for _, it := range e.Status.Items {
		out = append(out, it.Node)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
