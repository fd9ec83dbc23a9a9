package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"slices"
	"testing"
)

// TestTranslateRefusesIngressIPs: whoever wrote status.host, an ingress IP
// inside the cluster, join or service networks gives the master no rows
// for that service (and only that service) but an InvalidIngressIP
// problem.
func TestTranslateRefusesIngressIPs(t *testing.T) {
	for _, ip := range []string{"10.244.2.9", "10.96.0.1", "100.64.0.5", "127.0.0.1"} {
		w := newWorld(3)
		w.In.Config.AssumeAgentsReady = true
		w.ES("ns/bad", "node2")
		w.Svc("ns/bad", ip)
		w.EPs("ns/bad", "10.244.1.5@node1")
		w.ES("ns/good", "node2")
		w.Svc("ns/good", "172.18.0.100")
		w.EPs("ns/good", "10.244.1.6@node1")
		d := Translate(w.In)
		var reasons []translate.Reason
		for _, p := range d.Problems.For("ns/bad") {
			reasons = append(reasons, p.Reason)
		}
		if !slices.Contains(reasons, translate.ReasonInvalidIngressIP) {
			t.Errorf("ingress %s: problems %v; want InvalidIngressIP", ip, d.Problems.For("ns/bad"))
		}
		var members []string
		for _, as := range d.Rows[translate.NodeKey("node2")].AddressSets {
			members = append(members, as.Addresses...)
		}
		if slices.Contains(members, "10.244.1.5") || !slices.Contains(members, "10.244.1.6") {
			t.Errorf("ingress %s: node2's sets hold %v; want the good service's 10.244.1.6 only", ip, members)
		}
	}
}
