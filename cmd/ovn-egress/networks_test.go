package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// resolved runs flag parsing and resolveNetworks as the master does, with
// args, against the test API server; it returns the networks and the
// ovn_egress_network series.
func resolved(t *testing.T, args ...string) (translate.Config, testenv.Samples) {
	t.Helper()
	var cfg translate.Config
	reg := prometheus.NewRegistry()
	app := &cli.App{Flags: translateFlags(), Action: func(c *cli.Context) error {
		var err error
		if cfg, err = translateConfig(c); err != nil {
			return err
		}
		return resolveNetworks(c.Context, c, &cfg, kube.Client, "master", reg, quietLog())
	}}
	if err := app.RunContext(context.Background(), append([]string{"master"}, args...)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := testenv.Samples{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			out[testenv.Series(mf.GetName(), labels...)] = m.GetGauge().GetValue()
		}
	}
	return cfg, out
}

func prefixes(cfg translate.Config) string {
	return prefixList(cfg.ClusterSubnets) + " | " + prefixList(cfg.JoinSubnets) + " | " + prefixList(cfg.ServiceCIDRs)
}

// TestResolveNetworks: with no network flag the master takes the cluster's
// networks from ovn-kubernetes' ovn-config (host prefixes dropped), the
// join subnets from ovn-kubernetes' defaults for those families, and says
// where each came from in ovn_egress_network; without ovn-config the
// service networks come from the ServiceCIDR objects; a flag the cluster
// disagrees with is kept and reported as a Warning Event on the object
// that says otherwise.
func TestResolveNetworks(t *testing.T) {
	ctx := context.Background()
	if _, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ovn-kubernetes"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ovn-kubernetes", Name: "ovn-config"},
		Data: map[string]string{"net_cidr": "10.128.0.0/14/23,fd01::/48/64", "svc_cidr": "172.30.0.0/16,fd02::/112"}}
	if _, err := kube.Client.CoreV1().ConfigMaps("ovn-kubernetes").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := false
	remove := func() {
		if !deleted {
			deleted = true
			_ = kube.Client.CoreV1().ConfigMaps("ovn-kubernetes").Delete(context.Background(), "ovn-config", metav1.DeleteOptions{})
		}
	}
	t.Cleanup(remove)

	cfg, m := resolved(t)
	if got, want := prefixes(cfg), "10.128.0.0/14,fd01::/48 | 100.64.0.0/16,fd98::/64 | 172.30.0.0/16,fd02::/112"; got != want {
		t.Errorf("discovered from ovn-config: %s, want %s", got, want)
	}
	for _, s := range []struct{ kind, cidr, source string }{
		{"cluster", "10.128.0.0/14", "ConfigMap ovn-kubernetes/ovn-config"},
		{"service", "fd02::/112", "ConfigMap ovn-kubernetes/ovn-config"},
		{"join", "100.64.0.0/16", "ovn-kubernetes' default"},
	} {
		if v, ok := m.Get("ovn_egress_network", "kind", s.kind, "cidr", s.cidr, "source", s.source); !ok || v != 1 {
			t.Errorf("ovn_egress_network{kind=%s,cidr=%s,source=%s} = %v (present %v); have %v", s.kind, s.cidr, s.source, v, ok, m)
		}
	}

	// A flag the cluster disagrees with: kept, and a Warning on ovn-config.
	cfg, m = resolved(t, "--cluster-subnets=10.244.0.0/16")
	if got := prefixList(cfg.ClusterSubnets); got != "10.244.0.0/16" {
		t.Errorf("--cluster-subnets not kept: %s", got)
	}
	if _, ok := m.Get("ovn_egress_network", "kind", "cluster", "cidr", "10.244.0.0/16", "source", "flag"); !ok {
		t.Errorf("the flag's network is not exposed as source flag: %v", m)
	}
	sel := fields.Set{"involvedObject.name": "ovn-config", "reason": "NetworkFlagDisagrees"}.AsSelector().String()
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err := kube.Client.CoreV1().Events("ovn-kubernetes").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "--cluster-subnets: the cluster networks given (10.244.0.0/16) do not cover 10.128.0.0/14,fd01::/48")
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no NetworkFlagDisagrees Warning on ovn-config: %+v", evs.Items)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Without ovn-config: the service networks of the ServiceCIDR objects
	// (the API server's default one), the pod networks the defaults.
	remove()
	cfg, m = resolved(t)
	if got, want := prefixList(cfg.ServiceCIDRs), testenv.ServiceCIDRs; got != want {
		t.Errorf("service networks from the ServiceCIDRs: %s, want %s", got, want)
	}
	if _, ok := m.Get("ovn_egress_network", "kind", "service", "cidr", "10.96.0.0/16", "source", "ServiceCIDR kubernetes"); !ok {
		t.Errorf("the ServiceCIDR source is not exposed: %v", m)
	}
	if _, ok := m.Get("ovn_egress_network", "kind", "cluster", "cidr", translate.DefaultConfig().ClusterSubnets[0].String(), "source", "default"); !ok {
		t.Errorf("the default pod networks are not exposed as source default: %v", m)
	}
}
