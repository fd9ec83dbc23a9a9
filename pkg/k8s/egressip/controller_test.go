package egressip_test

import (
	"context"
	"fmt"
	eipt "github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/egressip"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.RunWithKube(m, "oe-egressip-", &kube)) }

// node creates a Ready Node on 172.18.0.0/16 with address 172.18.0.n,
// labelled egress-assignable when assignable.
func node(t *testing.T, name string, n int, assignable bool) {
	t.Helper()
	nd := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
		Annotations: map[string]string{
			translate.AnnotPrimaryIfAddr: fmt.Sprintf(`{"ipv4":"172.18.0.%d/16"}`, n),
			translate.AnnotHostCIDRs:     fmt.Sprintf(`["172.18.0.%d/16"]`, n),
		}}}
	if assignable {
		nd.Labels[eipt.LabelEgressAssignable] = ""
	}
	nd, err := kube.Client.CoreV1().Nodes().Create(t.Context(), nd, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	nd.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := kube.Client.CoreV1().Nodes().UpdateStatus(t.Context(), nd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last: %s", what, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAssignmentThroughTheAPIServer: the controller on a real API server
// writes status.items as assignment decides, moves an IP off a node that
// loses its label, and reports an IP that cannot be assigned — and a node
// address asked for as an egress IP — as Warning Events on the EgressIP.
func TestAssignmentThroughTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	client, err := eipclient.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"eip-node1", "eip-node2", "eip-node3"} {
		node(t, n, i+1, n != "eip-node3")
	}
	recorder, stopEvents, err := controller.NewRecorder(ctx, kube.Client, corev1.EventSource{Component: "ovn-egress-master"})
	if err != nil {
		t.Fatal(err)
	}
	defer stopEvents()
	kubeInf, eipInf := informer.Kube(kube.Client), informer.EgressIP(client)
	var mu sync.Mutex
	unreachable := map[string]bool{}
	log := logrus.New()
	log.SetOutput(testWriter{t})
	c, err := egressip.New(egressip.Config{Unreachable: func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		return map[string]bool{"eip-node1": unreachable["eip-node1"]}
	}}, logrus.NewEntry(log), client, kubeInf, eipInf, recorder)
	if err != nil {
		t.Fatal(err)
	}
	kubeInf.Start(ctx.Done())
	eipInf.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done; kubeInf.Shutdown(); eipInf.Shutdown() }()

	eips := client.K8sV1().EgressIPs()
	create := func(name string, ips ...string) {
		e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: egressipv1.EgressIPSpec{EgressIPs: ips,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": name}}}}
		if _, err := eips.Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = eips.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	status := func(name, want string) {
		t.Helper()
		eventually(t, fmt.Sprintf("%s's status.items = %q", name, want), func() (bool, string) {
			e, err := eips.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, it := range e.Status.Items {
				got = append(got, it.EgressIP+"@"+it.Node)
			}
			return strings.Join(got, " ") == want, strings.Join(got, " ")
		})
	}
	ready := func(name string, st metav1.ConditionStatus, reason, says string) {
		t.Helper()
		eventually(t, fmt.Sprintf("%s's Ready %s (%s)", name, st, reason), func() (bool, string) {
			e, err := eips.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			got := meta.FindStatusCondition(e.Status.Conditions, conditions.Ready)
			if got == nil {
				return false, "no Ready"
			}
			return got.Status == st && got.Reason == reason && strings.Contains(got.Message, says) && got.ObservedGeneration == e.Generation,
				fmt.Sprintf("%s %s %q at generation %d of %d", got.Status, got.Reason, got.Message, got.ObservedGeneration, e.Generation)
		})
	}
	event := func(name, reason, text string) {
		t.Helper()
		eventually(t, fmt.Sprintf("a %s Event on %s", reason, name), func() (bool, string) {
			evs, err := kube.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			var seen []string
			for _, ev := range evs.Items {
				if ev.InvolvedObject.Kind == "EgressIP" && ev.InvolvedObject.Name == name {
					seen = append(seen, ev.Reason+": "+ev.Message)
					if ev.Reason == reason && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, text) {
						return true, ""
					}
				}
			}
			return false, strings.Join(seen, "; ")
		})
	}

	create("blue", "172.18.1.10", "172.18.1.11")
	status("blue", "172.18.1.10@eip-node1 172.18.1.11@eip-node2")
	create("red", "172.18.1.20")
	status("red", "172.18.1.20@eip-node1")

	// node1 becomes unreachable: its IPs move where they can; blue's
	// first IP cannot (node2 holds blue's other one, node3 is not assignable).
	mu.Lock()
	unreachable["eip-node1"] = true
	mu.Unlock()
	c.Enqueue()
	status("red", "172.18.1.20@eip-node2")
	status("blue", "172.18.1.11@eip-node2")
	event("blue", string(eipt.ReasonNoMatchingNode), "egress IP 172.18.1.10 is unassigned: no node can hold it (1 already holds another IP of this EgressIP, 1 not labelled k8s.ovn.org/egress-assignable, 1 unreachable (health check))")
	ready("blue", metav1.ConditionFalse, string(eipt.ReasonNoMatchingNode), "1 of 2 egress IPs unassigned (172.18.1.10)")

	// node3 gets the label: blue's first IP lands there; the rest stays.
	n3, err := kube.Client.CoreV1().Nodes().Get(ctx, "eip-node3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n3.Labels = map[string]string{eipt.LabelEgressAssignable: ""}
	if _, err := kube.Client.CoreV1().Nodes().Update(ctx, n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	status("blue", "172.18.1.10@eip-node3 172.18.1.11@eip-node2")
	status("red", "172.18.1.20@eip-node2")
	ready("blue", metav1.ConditionTrue, conditions.ReasonReady, "")
	ready("red", metav1.ConditionTrue, conditions.ReasonReady, "")

	// Converged: syncing again writes nothing, and the generation (which
	// every status write of this CRD moves) stays.
	before, _ := eips.Get(ctx, "blue", metav1.GetOptions{})
	writes := c.Stats().StatusWrites
	for range 3 {
		c.Enqueue()
		eventually(t, "idle", func() (bool, string) { return c.Idle(), "" })
	}
	if after, _ := eips.Get(ctx, "blue", metav1.GetOptions{}); after.Generation != before.Generation || c.Stats().StatusWrites != writes {
		t.Errorf("converged, synced again: generation %d -> %d, status writes %d -> %d", before.Generation, after.Generation, writes, c.Stats().StatusWrites)
	}

	// An IP that is a node's own address is refused with an Event.
	create("green", "172.18.0.2")
	event("green", string(eipt.ReasonEgressIPConflict), "172.18.0.2 is an address of node eip-node2")
	status("green", "")
	if st := c.Stats(); st.StatusWrites < 5 {
		t.Errorf("stats %+v; want at least 5 status writes", st)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
