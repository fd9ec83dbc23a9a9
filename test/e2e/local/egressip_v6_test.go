package local

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TestEgressIPv6Failover: an IPv6 egress IP moves off a node that dies.
// OVN announces a moved IPv4 NAT address (gratuitous ARP from the gateway
// router's nat-addresses=router) but not an IPv6 one, so the outside keeps
// sending the replies to the dead node's MAC until its neighbour
// unreachability detection gives up (23 s measured, reference/dataplane.md
// §5). The new holder's agent (--egressip) sends unsolicited neighbour
// advertisements for it with its gateway router's MAC: the outside's
// capture sees them, its neighbour entry points at the new node's GR, and
// the pod's IPv6 connections resume — the time is logged.
func TestEgressIPv6Failover(t *testing.T) {
	c, eips, team := newEgressIPCluster(t, "eip-v6", ipfamily.V4, ipfamily.V6)
	selected := c.addPod("selected", "node1", 5)
	c.podObject(selected, map[string]string{"app": "eip"})
	ip := netip.MustParseAddr("fc00:f853:ccd:e793::213")
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e2e-v6-" + c.ns}, Spec: egressipv1.EgressIPSpec{
		EgressIPs: []string{ip.String()}, NamespaceSelector: selector("team", team), PodSelector: selector("app", "eip")}}
	if _, err := eips.K8sV1().EgressIPs().Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eips.K8sV1().EgressIPs().Delete(context.Background(), e.Name, metav1.DeleteOptions{}) })
	holder := func() string {
		got, err := eips.K8sV1().EgressIPs().Get(context.Background(), e.Name, metav1.GetOptions{})
		if err != nil || len(got.Status.Items) != 1 {
			return ""
		}
		return got.Status.Items[0].Node
	}
	var first string
	c.eventually("the IP assigned", 15*time.Second, func() bool { first = holder(); return first != "" })
	c.expectSourceFamily(selected, ipfamily.V6, 15*time.Second, only([]netip.Addr{ip}))
	grMAC := func(node string) string { return testenv.MAC(c.topo.Node(node).ExternalIPs[0].Addr()) }
	neighbour := func() string {
		out, _ := c.dp.Ext.Run("ip", "-6", "neigh", "show", ip.String(), "dev", "eth0")
		return strings.TrimSpace(out)
	}
	if n := neighbour(); !strings.Contains(n, grMAC(first)) {
		t.Fatalf("the outside's neighbour entry for %s is %q, want %s's gateway router MAC %s", ip, n, first, grMAC(first))
	}

	// Rounds (failoverRounds): the holder dies, the IP moves to the other
	// node; the dead node is revived (the IP stays where it is: sticky) and
	// the next round kills the new holder.
	rounds := failoverRounds()
	ext := netip.AddrPortFrom(c.dp.ExtIPs()[1], echoPort)
	var took []time.Duration
	for round := 1; round <= rounds; round++ {
		survivor := map[string]string{"node2": "node3", "node3": "node2"}[first]
		died := time.Now()
		c.kill(first)
		c.dp.CutGateway(t, first) // its GR dies with it
		var moved time.Duration
		c.eventually("status.items on "+survivor, 15*time.Second, func() bool { moved = time.Since(died); return holder() == survivor })
		c.eventually("every IPv6 connection through "+survivor, 60*time.Second, func() bool {
			for range 5 {
				if got, err := testenv.Ask(selected.ns, "tcp", ext, 300*time.Millisecond); err != nil || got != ip {
					return false
				}
			}
			took = append(took, time.Since(died))
			return true
		})
		var unsolicited []testenv.Announcement
		for _, a := range c.capture.Announcements(ip, died) {
			if !a.Solicited {
				unsolicited = append(unsolicited, a)
			}
		}
		t.Logf("round %d, %s died: the IP on %s after %s; 5 consecutive IPv6 connections left with %s after %s; unsolicited announcements since: %v; the outside's entry: %s",
			round, first, survivor, ms(moved), ip, ms(took[len(took)-1]), unsolicited, neighbour())
		// The dead node's own last announcement may still be in flight (or
		// read late) when the kill starts: what counts is that the
		// survivor's came, and that no other MAC was announced after it.
		i := slices.IndexFunc(unsolicited, func(a testenv.Announcement) bool { return a.MAC == grMAC(survivor) })
		if i < 0 || slices.ContainsFunc(unsolicited[i:], func(a testenv.Announcement) bool { return a.MAC != grMAC(survivor) }) {
			c.dumpLogs()
			t.Fatalf("no unsolicited neighbour advertisement of %s with %s's GR MAC %s reached the outside last: %v", ip, survivor, grMAC(survivor), unsolicited)
		}
		if n := neighbour(); !strings.Contains(n, grMAC(survivor)) {
			t.Fatalf("the outside's neighbour entry for %s is %q, want %s", ip, n, grMAC(survivor))
		}
		if round == rounds {
			break
		}
		c.dp.RestoreGateway(t, first)
		c.revive(first)
		// The master's probes (every 200 ms) see it answer again: its
		// failure count stops growing for three probe intervals.
		revived := first
		c.eventually("the master's probes of "+revived+" answered", 20*time.Second, func() bool {
			failures := func() (float64, bool) {
				m, err := c.masterMetrics(c.leaderIndex())
				if err != nil {
					return 0, false
				}
				v, _ := m.Get("ovn_egress_health_probe_failures_total", "node", revived)
				return v, true
			}
			a, ok1 := failures()
			time.Sleep(600 * time.Millisecond)
			b, ok2 := failures()
			return ok1 && ok2 && a == b
		})
		first = survivor
	}
	slices.Sort(took)
	t.Logf("IPv6 egress IP failover, %d rounds: traffic resumed after %v (median %s)", rounds, took, ms(took[len(took)/2]))
}
