package master_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

// TestTenantNetworkAllowList: with dist/network-allowlist.yaml (the
// chart's networkAllowList) a tenant names only the networks its
// namespace is given in the ConfigMap ovn-egress/ovn-egress-networks (or
// every namespace, "_all"): another network is refused with the list, and
// without the ConfigMap every network is; an EgressService without a
// network never is, and an update that keeps a network dropped from the
// list later is allowed.
func TestTenantNetworkAllowList(t *testing.T) {
	ctx := context.Background()
	installTenantPolicy(t, "../../../dist/network-allowlist.yaml", "ovn-egress-egressservice-networks", "ovn-egress-networks",
		func(ns string) bool {
			es := testenv.EgressService(ns, "probe", "")
			es.Spec.Network = "not-allowed-anywhere"
			return createAccepted(es)
		})
	nsA, nsB := kube.Namespace(t), kube.Namespace(t)
	for _, ns := range []string{nsA, nsB} {
		t.Cleanup(func() {
			_ = kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		})
	}
	a, b := tenant(t, nsA), tenant(t, nsB)
	seq := 0
	newES := func(ns, network string) *egressv1.EgressService {
		seq++
		es := testenv.EgressService(ns, fmt.Sprintf("es%d", seq), "")
		es.Spec.Network = network
		return es
	}
	create := func(cs versioned.Interface, ns, network string) (string, error) {
		es := newES(ns, network)
		_, err := cs.K8sV1().EgressServices(ns).Create(ctx, es, metav1.CreateOptions{})
		return es.Name, err
	}
	const refusal = "ValidatingAdmissionPolicy 'ovn-egress-egressservice-networks'"
	waitFor := func(cs versioned.Interface, ns, network, want string) {
		t.Helper()
		admissionOutcome(t, cs, func() (*egressv1.EgressService, error) {
			return cs.K8sV1().EgressServices(ns).Create(ctx, newES(ns, network), metav1.CreateOptions{})
		}, refusal, want)
	}

	// The chart's empty list: no network, but the default path is never
	// refused.
	waitFor(a, nsA, "100", "spec.network 100 is not a network namespace "+nsA+" may use (ConfigMap ovn-egress/ovn-egress-networks allows: none)")
	if _, err := create(a, nsA, ""); err != nil {
		t.Errorf("an EgressService without a network refused: %v", err)
	}

	cm, err := kube.Client.CoreV1().ConfigMaps("ovn-egress").Get(ctx, "ovn-egress-networks", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{nsA: "100, vrf-red", "_all": "shared"}
	if cm, err = kube.Client.CoreV1().ConfigMaps("ovn-egress").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(a, nsA, "vrf-red", "")
	for _, c := range []struct {
		cs            versioned.Interface
		ns, net, want string
	}{
		{a, nsA, "100", ""},
		{a, nsA, "shared", ""},
		{a, nsA, "200", "spec.network 200 is not a network namespace " + nsA + " may use (ConfigMap ovn-egress/ovn-egress-networks allows: 100, vrf-red, shared)"},
		{b, nsB, "shared", ""},
		{b, nsB, "100", "spec.network 100 is not a network namespace " + nsB + " may use (ConfigMap ovn-egress/ovn-egress-networks allows: shared)"},
	} {
		_, err := create(c.cs, c.ns, c.net)
		if c.want == "" && err != nil {
			t.Errorf("network %q in %s refused: %v", c.net, c.ns, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("network %q in %s: %v; want refused: %s", c.net, c.ns, err, c.want)
		}
	}

	// The list shrinks: an existing EgressService keeps its network through
	// updates, but cannot switch to one it may not use.
	kept, err := create(a, nsA, "100")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[nsA] = "vrf-red"
	if _, err := kube.Client.CoreV1().ConfigMaps("ovn-egress").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(a, nsA, "100", "allows: vrf-red, shared")
	es, err := a.K8sV1().EgressServices(nsA).Get(ctx, kept, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Labels = map[string]string{"touched": "yes"}
	if es, err = a.K8sV1().EgressServices(nsA).Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Errorf("an update keeping network 100 (no longer listed) refused: %v", err)
	} else {
		es.Spec.Network = "200"
		if _, err := a.K8sV1().EgressServices(nsA).Update(ctx, es, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Errorf("a switch to network 200: %v, want refused by the policy", err)
		}
	}
}
