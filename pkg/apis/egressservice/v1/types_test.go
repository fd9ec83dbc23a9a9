package v1_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
)

func TestFakeClientsetRoundTrip(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewSimpleClientset()
	in := &v1.EgressService{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "svc1"},
		Spec: v1.EgressServiceSpec{
			SourceIPBy:   v1.LoadBalancerIP,
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "yes"}},
			Network:      "100",
		},
	}
	if _, err := cs.K8sV1().EgressServices("ns1").Create(ctx, in, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.K8sV1().EgressServices("ns1").Get(ctx, "svc1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.SourceIPBy != v1.LoadBalancerIP || got.Spec.Network != "100" || got.Spec.NodeSelector.MatchLabels["egress"] != "yes" {
		t.Fatalf("round trip changed the spec: %+v", got.Spec)
	}
	got.Status.Host = v1.HostAll
	if _, err := cs.K8sV1().EgressServices("ns1").UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := cs.K8sV1().EgressServices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Status.Host != "ALL" {
		t.Fatalf("list = %+v", list.Items)
	}
	// DeepCopy is a real copy.
	cp := got.DeepCopy()
	cp.Spec.NodeSelector.MatchLabels["egress"] = "no"
	if got.Spec.NodeSelector.MatchLabels["egress"] != "yes" {
		t.Fatal("DeepCopy shares the selector map")
	}
}
