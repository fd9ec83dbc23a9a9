package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/scheme"
)

// Events recorded on an EgressService through a client-go EventBroadcaster
// are stored with a reference to it, repeats are counted, and users see
// them with kubectl describe.
func TestEvents(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	es := create(t, ns, "web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP})

	broadcaster := record.NewBroadcaster(record.WithContext(t.Context()))
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.Client.CoreV1().Events(ns)})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ovn-egress-controller"})

	recorder.Eventf(es, corev1.EventTypeWarning, "NoHostAvailable", "no node matches nodeSelector %q", "egress=yes")
	recorder.Eventf(es, corev1.EventTypeWarning, "NoHostAvailable", "no node matches nodeSelector %q", "egress=yes")
	recorder.Event(es, corev1.EventTypeNormal, "HostAssigned", "node-1 handles the egress traffic")

	selector := fields.Set{"involvedObject.kind": "EgressService", "involvedObject.name": "web"}.String()
	var got []string
	deadline := time.Now().Add(15 * time.Second)
	want := []string{
		`Normal HostAssigned "node-1 handles the egress traffic" x1`,
		`Warning NoHostAvailable "no node matches nodeSelector \"egress=yes\"" x2`,
	}
	for {
		list, err := kube.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, e := range list.Items {
			ref := e.InvolvedObject
			if ref.APIVersion != "k8s.ovn.org/v1" || ref.Namespace != ns || ref.UID != es.UID || e.Source.Component != "ovn-egress-controller" {
				t.Errorf("event %s: involvedObject %+v source %+v; want the EgressService and ovn-egress-controller", e.Name, ref, e.Source)
			}
			got = append(got, fmt.Sprintf("%s %s %q x%d", e.Type, e.Reason, e.Message, e.Count))
		}
		slices.Sort(got)
		if slices.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events:\n%q\nwant\n%q", got, want)
	}

	out, err := kube.Kubectl("describe", "egressservice", "web", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Warning  NoHostAvailable", "(x2 over", `no node matches nodeSelector "egress=yes"`, "Normal   HostAssigned"} {
		if !strings.Contains(out, w) {
			t.Errorf("kubectl describe does not show %q:\n%s", w, out)
		}
	}
}
