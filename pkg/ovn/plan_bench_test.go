package ovn_test

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"testing"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// BenchmarkBuildPlanDrain is the plan of a drain's one sync at the default
// bench size (10,000 services × 4 endpoints on 50 nodes, in a real NB): the
// 200 services of node1 move to the other 49 hosts, and the plan of those
// 50 keys is diffed against the cache (nothing is written).
func BenchmarkBuildPlanDrain(b *testing.B) {
	o := testenv.NewOVN(b)
	topo := testenv.DefaultTopology(50)
	o.BuildTopology(b, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := ovn.NewNBClient(ctx, ovn.ClientConfig{Addresses: []string{o.NBAddress()}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cfg := translate.DefaultConfig()
	cfg.ClusterSubnets, cfg.JoinSubnets = topo.ClusterSubnets, topo.JoinSubnets
	cfg.AssumeAgentsReady = true
	objs := translate.Objects{}
	for _, n := range topo.Nodes {
		objs.Nodes = append(objs.Nodes, topo.NodeObject(n))
	}
	for s := range 10000 {
		ns, name := fmt.Sprintf("ns%d", s%100), fmt.Sprintf("svc%d", s)
		var eps []string
		for e := range 4 {
			i := s*4 + e
			eps = append(eps, fmt.Sprintf("10.244.%d.%d@node%d", 1+i%50, 2+(i/50)%250, 1+i%50))
		}
		objs.EgressServices = append(objs.EgressServices, testenv.EgressService(ns, name, fmt.Sprintf("node%d", 1+s%50)))
		objs.Services = append(objs.Services, testenv.LoadBalancerService(ns, name, fmt.Sprintf("172.19.%d.%d", s/250, 1+s%250)))
		objs.EndpointSlices = append(objs.EndpointSlices, testenv.EndpointSlices(ns, name, eps...)...)
	}
	in := translate.InputFromObjects(cfg, objs)
	keys := in.AllKeys()
	a := ovn.NewApplier(c, 0)
	if _, err := a.Apply(ctx, keys, egressservice.Translate(in)); err != nil {
		b.Fatal(err)
	}
	moved := 0
	for i, es := range in.EgressServices {
		if es.Status.Host == "node1" {
			m := es.DeepCopy()
			m.Status.Host = fmt.Sprintf("node%d", 2+moved%49)
			in.EgressServices[i] = m
			moved++
		}
	}
	var drain []translate.Key
	for _, n := range topo.Nodes {
		drain = append(drain, translate.NodeKey(n.Name))
	}
	desired := egressservice.Translate(in)
	b.ResetTimer()
	for range b.N {
		p, err := ovn.BuildPlan(ctx, c, drain, desired)
		if err != nil {
			b.Fatal(err)
		}
		if p.Len() < 49 {
			b.Fatalf("%d changes, want the 49 sets and node1's rows", p.Len())
		}
	}
	b.ReportMetric(float64(moved), "services-moved")
}
