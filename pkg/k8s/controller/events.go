package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	egressscheme "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/scheme"
	eipscheme "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned/scheme"
)

// NewRecorder returns an Event recorder posting through kube as source
// (component, and host when the component is per node), and the function
// that flushes and stops it. Events name their objects through a scheme of
// the recorder's own: adding the EgressService and EgressIP types to client-go's global
// scheme would race with every client reading it (two masters in one test
// process).
func NewRecorder(ctx context.Context, kube kubernetes.Interface, source corev1.EventSource) (record.EventRecorder, func(), error) {
	sch := runtime.NewScheme()
	if err := errors.Join(scheme.AddToScheme(sch), egressscheme.AddToScheme(sch), eipscheme.AddToScheme(sch)); err != nil {
		return nil, nil, fmt.Errorf("event scheme: %w", err)
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(sch, source), BoundedStop(b.Shutdown, recorderFlush), nil
}

// recorderFlush bounds how long stopping a recorder waits for its queued
// Events: the broadcaster's Shutdown delivers them first, retrying each
// for up to about two minutes while the API server is away — a master
// that lost its Lease in an API outage hung that long before it exited
// (found by the chaos soak), so its replacement never started.
const recorderFlush = 2 * time.Second

// BoundedStop runs stop and returns once it has, or after d.
func BoundedStop(stop func(), d time.Duration) func() {
	return func() {
		done := make(chan struct{})
		go func() { stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(d):
		}
	}
}
