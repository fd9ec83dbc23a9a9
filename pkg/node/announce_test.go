package node

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressip/v1"
)

// TestNeighborAdvertisementUpdatesTheNeighbour (real kernel, two test
// namespaces on a veth): a neighbour holding a stale entry for an egress IP
// that is no address of the sender's host — it lives on a gateway router —
// takes the MAC of the unsolicited advertisement's option, as a router in
// front of the node does when the IP moves.
func TestNeighborAdvertisementUpdatesTheNeighbour(t *testing.T) {
	host, outside := testenv.NewNetNS(t, "oe-na-host"), testenv.NewNetNS(t, "oe-na-out")
	testenv.Veth(t, host, "eth0", outside, "eth0")
	host.Addr(t, "eth0", "fc00:f853:ccd:e793::3/64")
	outside.Addr(t, "eth0", "fc00:f853:ccd:e793::1/64")
	const ip = "fc00:f853:ccd:e793::213"
	outside.MustRun(t, "ip", "-6", "neigh", "replace", ip, "lladdr", "0a:58:ac:12:00:03", "dev", "eth0", "nud", "stale")
	ns, err := OpenNamespace(host.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	gr, _ := net.ParseMAC("0a:58:ac:12:00:04")
	var dev string
	if err := ns.Do(func() (err error) {
		// The primary address is the gateway router's, on the host's network.
		if dev, err = interfaceOn(netip.MustParsePrefix("fc00:f853:ccd:e793::4/64")); err != nil {
			return err
		}
		return sendNeighborAdvertisement(dev, netip.MustParseAddr(ip), gr)
	}); err != nil {
		t.Fatal(err)
	}
	if dev != "eth0" {
		t.Errorf("the interface holding the primary address: %q, want eth0", dev)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := outside.Run("ip", "-6", "neigh", "show", ip, "dev", "eth0")
		if strings.Contains(out, "0a:58:ac:12:00:04") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the neighbour's entry for %s: %q, want the advertised 0a:58:ac:12:00:04", ip, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ns.Do(func() error { return sendNeighborAdvertisement(dev, netip.MustParseAddr("172.18.0.5"), gr) }); err == nil {
		t.Error("an IPv4 address advertised as an IPv6 neighbour")
	}
}

func TestHeldIPv6AndGatewayFacts(t *testing.T) {
	eips := []*egressipv1.EgressIP{
		{Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{
			{Node: "node2", EgressIP: "fc00::b"}, {Node: "node2", EgressIP: "172.18.0.5"}, {Node: "node3", EgressIP: "fc00::c"}}}},
		{Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{
			{Node: "node2", EgressIP: "fc00::a"}, {Node: "node2", EgressIP: "not-an-ip"}, {Node: "node2", EgressIP: "::ffff:172.18.0.6"}}}},
	}
	if got := HeldIPv6("node2", eips); len(got) != 2 || got[0].String() != "fc00::a" || got[1].String() != "fc00::b" {
		t.Errorf("held on node2: %v, want [fc00::a fc00::b]", got)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2", Annotations: map[string]string{
		"k8s.ovn.org/node-primary-ifaddr": `{"ipv4":"172.18.0.3/16","ipv6":"fc00:f853:ccd:e793::3/64"}`,
		"k8s.ovn.org/l3-gateway-config":   `{"default":{"mode":"shared","mac-address":"0a:58:ac:12:00:03"}}`}}}
	if ip, mac := GatewayFacts(n); ip.String() != "fc00:f853:ccd:e793::3/64" || mac.String() != "0a:58:ac:12:00:03" {
		t.Errorf("gateway facts %s %s", ip, mac)
	}
	n.Annotations = map[string]string{"k8s.ovn.org/node-primary-ifaddr": `{"ipv4":"172.18.0.3/16"}`}
	if ip, mac := GatewayFacts(n); ip.String() != "172.18.0.3/16" || mac != nil {
		t.Errorf("IPv4-only node without l3-gateway-config: %s %s", ip, mac)
	}
}
