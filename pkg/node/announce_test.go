package node

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
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

// TestAnnouncerRefusesAddressesItMustNotHold (real API server, real
// kernel): status items naming this node for the segment's gateway, a
// neighbour node's address, the network's own address and an address
// outside the node's networks — forged by whoever may write EgressIPs, or
// left by a master of an older release — are never announced, each is
// counted once as refused; the node's real egress IP beside them is.
func TestAnnouncerRefusesAddressesItMustNotHold(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := testenv.NewKube(t)
	host, peer := testenv.NewNetNS(t, "oe-na-guard"), testenv.NewNetNS(t, "oe-na-peer")
	testenv.Veth(t, host, "eth0", peer, "eth0")
	host.Addr(t, "eth0", "fc00:f853:ccd:e793::3/64")
	ns, err := OpenNamespace(host.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2", Annotations: map[string]string{
		"k8s.ovn.org/node-primary-ifaddr": `{"ipv6":"fc00:f853:ccd:e793::3/64"}`,
		"k8s.ovn.org/host-cidrs":          `["fc00:f853:ccd:e793::3/64"]`,
		"k8s.ovn.org/l3-gateway-config":   `{"default":{"mode":"shared","mac-address":"0a:58:ac:12:00:03","next-hops":["fc00:f853:ccd:e793::1"]}}`}}}
	if _, err := k.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eipc, err := eipclient.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	const good = "fc00:f853:ccd:e793::213"
	forged := []string{"fc00:f853:ccd:e793::1", "fc00:f853:ccd:e793::3", "fc00:f853:ccd:e793::", "fd99::5", "ff02::1"}
	obj := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "forged"}, Spec: egressipv1.EgressIPSpec{EgressIPs: append([]string{good}, forged...)}}
	for _, ip := range append([]string{good}, forged...) {
		obj.Status.Items = append(obj.Status.Items, egressipv1.EgressIPStatusItem{Node: "node2", EgressIP: ip})
	}
	if _, err := eipc.K8sV1().EgressIPs().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	a, err := NewAnnouncer("node2", ns, k.Client, eipc, reg, nil, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent := map[string]int{}
	a.send = func(_ string, ip netip.Addr, _ net.HardwareAddr) error {
		mu.Lock()
		defer mu.Unlock()
		sent[ip.String()]++
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	counted := func(result string) float64 {
		var m dto.Metric
		if err := a.sent.WithLabelValues(result).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	deadline := time.Now().Add(20 * time.Second)
	for counted("sent") < float64(len(announceGaps)) || counted("refused") < float64(len(forged)) {
		if time.Now().After(deadline) {
			t.Fatalf("sent %v, refused %v; want %d advertisements of %s and %d refusals", counted("sent"), counted("refused"), len(announceGaps), good, len(forged))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A later sync (the Node changes) refuses them again without counting.
	node.Labels = map[string]string{"touched": "yes"}
	if _, err := k.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	if len(sent) != 1 || sent[good] != len(announceGaps) {
		t.Errorf("advertised %v, want only %s, %d times", sent, good, len(announceGaps))
	}
	mu.Unlock()
	if r := counted("refused"); r != float64(len(forged)) {
		t.Errorf("refused counted %v, want %d (once per IP)", r, len(forged))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("announcer: %v", err)
	}
}
