package node

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Event reasons the agent reports on EgressServices, beyond the plan's
// translate reasons (NetworkNotFound, InvalidNetwork, SharedEndpoint).
const (
	// ReasonNetworkWithoutRoutes: the network's table has no route of a
	// family the agent points rules at; that traffic falls through to the
	// next rules (usually the main table).
	ReasonNetworkWithoutRoutes translate.Reason = "NetworkWithoutRoutes"
)

// EventSource is the component name on the agent's Events.
const EventSource = "ovn-egress-node"

// NewEventRecorder returns a recorder that posts Events through kube, named
// after the agent and its node, and a function that stops it.
func NewEventRecorder(kube kubernetes.Interface, nodeName string) (record.EventRecorder, func(), error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, fmt.Errorf("event scheme: %w", err)
	}
	if err := egressv1.AddToScheme(scheme); err != nil {
		return nil, nil, fmt.Errorf("event scheme: %w", err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	rec := b.NewRecorder(scheme, corev1.EventSource{Component: EventSource, Host: nodeName})
	return rec, b.Shutdown, nil
}
