package master

import (
	"context"
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Deployment modes of the master.
const (
	// ModeCentral: one NB holds every node; the master selects hosts and
	// translates.
	ModeCentral = "central"
	// ModeIC: interconnect, one NB per zone; the master only selects hosts,
	// and each node agent translates its own zone (package zone).
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
