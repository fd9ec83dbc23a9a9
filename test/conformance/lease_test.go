package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// candidate is one client-go leader elector on the shared Lease.
type candidate struct {
	id      string
	cancel  context.CancelFunc
	done    chan struct{}
	started chan struct{} // closed when it starts leading
	mu      sync.Mutex
	leading bool
}

func (c *candidate) isLeading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// Two candidates for one Lease: exactly one leads and holds it; when it
// steps down (releasing the Lease), the other takes over.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	start := func(id string) *candidate {
		ctx, cancel := context.WithCancel(t.Context())
		c := &candidate{id: id, cancel: cancel, done: make(chan struct{}), started: make(chan struct{})}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: "ovn-egress-controller"},
				Client:     kube.Client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: id},
			},
			LeaseDuration:   4 * time.Second,
			RenewDeadline:   3 * time.Second,
			RetryPeriod:     200 * time.Millisecond,
			ReleaseOnCancel: true,
			Name:            id,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					c.mu.Lock()
					c.leading = true
					c.mu.Unlock()
					close(c.started)
				},
				OnStoppedLeading: func() {
					c.mu.Lock()
					c.leading = false
					c.mu.Unlock()
				},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(c.done)
			le.Run(ctx)
		}()
		t.Cleanup(func() { cancel(); <-c.done })
		return c
	}
	a, b := start("candidate-a"), start("candidate-b")

	var leader, follower *candidate
	select {
	case <-a.started:
		leader, follower = a, b
	case <-b.started:
		leader, follower = b, a
	case <-time.After(10 * time.Second):
		t.Fatal("no candidate became leader")
	}
	// A few renewals later there is still exactly one leader.
	time.Sleep(600 * time.Millisecond)
	if !leader.isLeading() || follower.isLeading() {
		t.Errorf("%s leading %v, %s leading %v; want exactly %s", leader.id, leader.isLeading(), follower.id, follower.isLeading(), leader.id)
	}
	lease, err := kube.Client.CoordinationV1().Leases(ns).Get(t.Context(), "ovn-egress-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != leader.id || *lease.Spec.LeaseDurationSeconds != 4 || lease.Spec.RenewTime == nil {
		t.Errorf("lease holder %q duration %d renewed %v; want %s, 4 s and a renew time",
			*lease.Spec.HolderIdentity, *lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime, leader.id)
	}

	leader.cancel()
	<-leader.done
	select {
	case <-follower.started:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not take over after %s released the lease", follower.id, leader.id)
	}
	lease, err = kube.Client.CoordinationV1().Leases(ns).Get(t.Context(), "ovn-egress-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != follower.id || leader.isLeading() {
		t.Errorf("after the hand-over: holder %q, %s leading %v; want %s alone", *lease.Spec.HolderIdentity, leader.id, leader.isLeading(), follower.id)
	}
}
