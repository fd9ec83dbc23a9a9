package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	egressscheme "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/scheme"
)

// NewRecorder returns an Event recorder posting through kube as source
// (component, and host when the component is per node), and the function
// that flushes and stops it. Events name their objects through a scheme of
// the recorder's own: adding the EgressService types to client-go's global
// scheme would race with every client reading it (two masters in one test
// process).
func NewRecorder(ctx context.Context, kube kubernetes.Interface, source corev1.EventSource) (record.EventRecorder, func(), error) {
	sch := runtime.NewScheme()
	if err := errors.Join(scheme.AddToScheme(sch), egressscheme.AddToScheme(sch)); err != nil {
		return nil, nil, fmt.Errorf("event scheme: %w", err)
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(sch, source), b.Shutdown, nil
}
