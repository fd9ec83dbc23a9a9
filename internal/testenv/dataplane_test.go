package testenv

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TestDataplaneForwardsPackets proves the environment with real packets:
// a pod leaves through its node's GR with the GR's address; rerouted to
// another node's management port and SNATed there by nftables, it leaves
// with the load-balancer address (reference/hostpath.md §1).
func TestDataplaneForwardsPackets(t *testing.T) {
	o := NewOVN(t)
	topo := DefaultTopology(3, ipfamily.V4, ipfamily.V6)
	d := NewDataplane(t, o, topo)
	p4, p6 := topo.Nodes[0].PodIP(ipfamily.V4, 5), topo.Nodes[0].PodIP(ipfamily.V6, 5)
	pod := d.AddPod(t, "node1", "pod1", p4, p6)
	d.WaitHV(t)
	echo := StartEcho(t, d.Ext, 7777, d.ExtIPs()...)
	capture := StartCapture(t, d.Ext, "eth0")

	for i, ext := range d.ExtIPs() {
		for _, proto := range []string{"tcp", "udp"} {
			got, took, err := AskUntil(pod, proto, netip.AddrPortFrom(ext, 7777), 10*time.Second)
			if err != nil {
				t.Fatalf("%s to %s: %v", proto, ext, err)
			}
			if want := topo.Nodes[0].ExternalIPs[i].Addr(); got != want {
				t.Errorf("%s to %s: seen %s, want GR_node1's %s", proto, ext, got, want)
			}
			t.Logf("%s to %s: seen %s after %s", proto, ext, got, took)
		}
	}

	// The host path by hand: reroute to node2's management port, SNAT there.
	lb4, lb6 := netip.MustParseAddr("172.18.0.100"), netip.MustParseAddr("fc00:f853:ccd:e793::100")
	o.MustNBCtl(t, "create", "Address_Set", "name=hp4", `addresses="`+p4.String()+`"`,
		"--", "create", "Address_Set", "name=hp6", `addresses="`+p6.String()+`"`,
		"--", "lr-policy-add", "ovn_cluster_router", "102", "ip4.src == $hp4 && ip4.dst == {10.244.0.0/16, 100.64.0.0/16}", "allow",
		"--", "lr-policy-add", "ovn_cluster_router", "101", "ip4.src == $hp4", "reroute", "10.244.2.2",
		"--", "lr-policy-add", "ovn_cluster_router", "101", "ip6.src == $hp6", "reroute", "fd00:10:244:2::2")
	host := d.Hosts["node2"]
	nft := "table inet t {\n chain nat {\n  type nat hook postrouting priority srcnat; policy accept;\n" +
		"  ip saddr " + p4.String() + " snat ip to " + lb4.String() + "\n" +
		"  ip6 saddr " + p6.String() + " snat ip6 to " + lb6.String() + "\n }\n}\n"
	if out, err := host.Run("sh", "-c", "printf '"+nft+"' | nft -f -"); err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	d.Announce(t, "node2", lb4)
	d.Announce(t, "node2", lb6)
	d.WaitHV(t)
	for _, ext := range d.ExtIPs() {
		want := lb4
		if ipfamily.Of(ext) == ipfamily.V6 {
			want = lb6
		}
		for _, proto := range []string{"tcp", "udp"} {
			got, took, err := AskUntil(pod, proto, netip.AddrPortFrom(ext, 7777), 10*time.Second, want)
			if err != nil {
				t.Fatalf("%s to %s through node2: %v (seen %s)", proto, ext, err, got)
			}
			t.Logf("%s to %s through node2: seen %s after %s", proto, ext, got, took)
		}
	}
	for src := range capture.Sources() {
		for _, s := range topo.ClusterSubnets {
			if s.Contains(src) {
				t.Errorf("a pod address reached the outside: %s", src)
			}
		}
	}
	if len(echo.Seen()) < 8 {
		t.Errorf("echo saw %d sources", len(echo.Seen()))
	}
}
