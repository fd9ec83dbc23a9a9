package egressservice

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"testing"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// FuzzTranslate builds arbitrary inputs — garbage annotations, addresses,
// hosts, reports, service types — and checks that translation never panics,
// is deterministic, and only ever writes rows ovn-egress owns.
func FuzzTranslate(f *testing.F) {
	f.Add([]byte("seed"), "node1", "10.244.1.5", "172.18.0.100", `{"default":["10.244.1.0/24"]}`, `{"ns/s0":{"eps":"x"}}`)
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, "ALL", "fd00:10:244:1::5", "fc00::1", `{"default":"fd00:10:244:1::/64"}`, `not json`)
	f.Add([]byte{9, 9, 9}, "", "garbage", "", `{`, ``)
	f.Fuzz(func(t *testing.T, choices []byte, host, ep, ingress, subnets, report string) {
		pick := func(i int) byte {
			if len(choices) == 0 {
				return 0
			}
			return choices[i%len(choices)]
		}
		w := newWorld(int(pick(0)%4), ipfamily.V4, ipfamily.V6)
		if pick(1)%2 == 0 {
			w.In.Config.Backend = translate.BackendOVN
		}
		if pick(2)%2 == 0 {
			w.In.Config.UnassignedTraffic = translate.UnassignedDrop
		}
		if n := w.Raw["node1"]; n != nil {
			n.Annotations[translate.AnnotNodeSubnets] = subnets
			n.Annotations[translate.ReportAnnotation] = report
			n.Annotations[translate.AnnotGRLRPIfAddr] = subnets
			w.In.Nodes["node1"] = translate.ParseNode(n, w.In.Config.JoinSubnets)
		}
		for i := 0; i < int(pick(3)%5); i++ {
			key := fmt.Sprintf("ns/s%d", i)
			h := host
			if pick(4+i)%3 == 0 {
				h = fmt.Sprintf("node%d", pick(5+i)%4)
			}
			e := w.ES(key, h)
			if pick(6+i)%3 == 0 {
				e.Spec.SourceIPBy = egressv1.Network
			}
			if pick(7+i)%4 == 0 {
				e.Spec.Network = "100"
			}
			if pick(8+i)%5 != 0 {
				s := w.Svc(key, ingress, "172.18.0.9")
				if pick(9+i)%6 == 0 {
					s.Spec.Type = corev1.ServiceTypeNodePort
				}
			}
			w.EPs(key, ep+"@node1", "10.244.2.7@"+h, "fd00:10:244:1::9@node2")
		}
		a := Translate(w.In)
		b := Translate(w.In)
		ya, err := translate.YAML(a)
		if err != nil {
			t.Fatal(err)
		}
		yb, _ := translate.YAML(b)
		if string(ya) != string(yb) {
			t.Fatal("translation is not deterministic")
		}
		for _, r := range a.Rows {
			for _, as := range r.AddressSets {
				if k, ok := translate.KeyOf(as.ExternalIDs); !ok || k == "" {
					t.Fatalf("address set without owner: %+v", as)
				}
			}
			for _, p := range r.Policies {
				if _, ok := translate.KeyOf(p.ExternalIDs); !ok {
					t.Fatalf("policy without owner: %+v", p)
				}
			}
		}
		if _, err := translate.OVSDBTransact(a); err != nil {
			t.Fatal(err)
		}
		_ = translate.NBCtlCommands(a)
	})
}
