package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"strings"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TestDualStackEndpointOutsideClusterSubnets: on a dual-stack cluster whose
// --cluster-subnets names only the IPv4 network (the default), an IPv6 pod
// endpoint inside its node's IPv6 pod subnet is never dropped silently: it is
// a problem naming the address and the flag. With both networks given it
// gets its rows and no problem; a host-networked endpoint (a node address)
// is skipped without a problem, as before.
func TestDualStackEndpointOutsideClusterSubnets(t *testing.T) {
	w := newWorld(3, ipfamily.V4, ipfamily.V6)
	w.In.Config.AssumeAgentsReady = true
	w.ES("ns/web", "node2")
	w.Svc("ns/web", "172.18.0.100", "fc00:f853:ccd:e793::100")
	w.EPs("ns/web", "10.244.1.5@node1", "fd00:10:244:1::5@node1", "172.18.0.4@node3")
	v6 := translate.AddressSetName(setID(translate.OwnerHost, "node2", ipfamily.V6))

	w.In.Config.ClusterSubnets = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	d := Translate(w.In)
	var got []string
	for _, p := range d.Problems.For("ns/web") {
		if p.Reason == translate.ReasonEndpointOutsideClusterSubnets {
			got = append(got, p.Message)
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], "fd00:10:244:1::5") || !strings.Contains(got[0], "--cluster-subnets") ||
		!strings.Contains(got[0], "fd00:10:244:1::/64") || !strings.Contains(got[0], "IPv6") {
		t.Errorf("problems %q; want one naming fd00:10:244:1::5, its subnet and --cluster-subnets", got)
	}

	w.In.Config.ClusterSubnets = append(w.In.Config.ClusterSubnets, netip.MustParsePrefix("fd00:10:244::/48"))
	d = Translate(w.In)
	for _, p := range d.Problems {
		if p.Reason == translate.ReasonEndpointOutsideClusterSubnets {
			t.Errorf("with both cluster networks: %s", p)
		}
	}
	found := false
	for _, as := range d.Rows[translate.NodeKey("node2")].AddressSets {
		found = found || (as.Name == v6 && len(as.Addresses) == 1 && as.Addresses[0] == "fd00:10:244:1::5")
	}
	if !found {
		t.Errorf("with both cluster networks the IPv6 endpoint is not in node2's IPv6 set: %+v", d.Rows[translate.NodeKey("node2")].AddressSets)
	}
}
