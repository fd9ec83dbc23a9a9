package master_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

// installTenantPolicy applies a parametrised admission policy of dist/
// (its ConfigMap from the manifest, replacing any left) and, at cleanup,
// removes it: the API server drops a policy asynchronously, and until it
// has, the missing ConfigMap would refuse every EgressService of the
// package's later tests, so the cleanup waits until accepted(probe
// namespace) is true, then removes the ConfigMap.
func installTenantPolicy(t *testing.T, manifest, policy, configMap string, accepted func(ns string) bool) {
	t.Helper()
	ctx := context.Background()
	if err := kube.Client.CoreV1().ConfigMaps("ovn-egress").Delete(ctx, configMap, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := kube.Apply(ctx, "../../../dist/namespace.yaml", manifest); err != nil {
		t.Fatal(err)
	}
	adm := kube.Client.AdmissionregistrationV1()
	t.Cleanup(func() {
		ctx := context.Background()
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(ctx, policy, metav1.DeleteOptions{})
		_ = adm.ValidatingAdmissionPolicies().Delete(ctx, policy, metav1.DeleteOptions{})
		probe := kube.Namespace(t)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !accepted(probe); {
			time.Sleep(100 * time.Millisecond)
		}
		_ = kube.Client.CoreV1().ConfigMaps("ovn-egress").Delete(ctx, configMap, metav1.DeleteOptions{})
	})
}

// createAccepted creates es as an admin and deletes it again: whether the
// API server accepts it.
func createAccepted(es *egressv1.EgressService) bool {
	ctx := context.Background()
	if _, err := kube.Egress.K8sV1().EgressServices(es.Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		return false
	}
	_ = kube.Egress.K8sV1().EgressServices(es.Namespace).Delete(ctx, es.Name, metav1.DeleteOptions{})
	return true
}

// admissionOutcome creates through create until the outcome is in force
// (the API server loads a policy, its binding and its parameters
// asynchronously): refused by the policy with want in the message, or
// (want "") accepted. What it created while waiting is deleted.
func admissionOutcome(t *testing.T, cs versioned.Interface, create func() (*egressv1.EgressService, error), refusal, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		es, err := create()
		switch {
		case want == "" && err == nil:
			return
		case want != "" && err != nil && strings.Contains(err.Error(), refusal) && strings.Contains(err.Error(), want):
			return
		}
		if err == nil {
			_ = cs.K8sV1().EgressServices(es.Namespace).Delete(context.Background(), es.Name, metav1.DeleteOptions{})
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v; want %s", err, map[bool]string{true: "accepted", false: "refused naming " + want}[want == ""])
		}
		time.Sleep(100 * time.Millisecond)
	}
}
