package local

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TestGatewayBackend: with --snat-backend=ovn the SNAT is a NAT row on the
// host's gateway router; pods on every node leave with the LB IP, the host
// moves with the selector, and pod → pod is untouched. Dual-stack.
func TestGatewayBackend(t *testing.T) {
	c := newCluster(t, options{backend: "ovn", families: []ipfamily.Family{ipfamily.V4, ipfamily.V6}})
	p1, p3 := c.addPod("p1", "node1", 5), c.addPod("p3", "node3", 5)
	lb := c.service("web", 0, p1, p3)
	c.label("node2", "egress", "a")
	c.label("node3", "egress", "b")
	c.egressService("web", egressv1.EgressServiceSpec{NodeSelector: selector("egress", "a")})
	c.host("web", func(h string) bool { return h == "node2" })
	c.expectSource(p1, 15*time.Second, only(lb))
	c.expectSource(p3, 15*time.Second, only(lb))
	if !c.ovn.SNATs(t, "GR_node2", "172.18.0.100", "10.244.1.5") {
		t.Fatalf("GR_node2 NAT rows:\n%s", c.ovn.MustNBCtl(t, "lr-nat-list", "GR_node2"))
	}
	c.patchSelector("web", map[string]string{"egress": "b"})
	c.host("web", func(h string) bool { return h == "node3" })
	// IPv4 moves at once (the GR announces the moved address, nat-addresses=router);
	// OVN 23.03 announces no IPv6 NAT address, so IPv6 waits for the
	// outside's neighbour entry to expire (reference/dataplane.md §5).
	c.eventually("NAT rows moved to GR_node3", 10*time.Second, func() bool {
		return !strings.Contains(c.ovn.MustNBCtl(t, "lr-nat-list", "GR_node2"), "172.18.0.100") &&
			strings.Contains(c.ovn.MustNBCtl(t, "lr-nat-list", "GR_node3"), "172.18.0.100")
	})
	c.expectSourceFamily(p1, ipfamily.V4, 15*time.Second, only(lb))
}

// TestSwitchBackend: restarting the master with the other backend moves
// the SNAT between the host and the GR without a packet leaving with a pod
// address (the suite's capture checks the whole run).
func TestSwitchBackend(t *testing.T) {
	c := newCluster(t, options{})
	p1 := c.addPod("p1", "node1", 5)
	lb := c.service("web", 0, p1)
	c.egressService("web", egressv1.EgressServiceSpec{})
	c.host("web", anyHost)
	c.expectSource(p1, 15*time.Second, only(lb))
	stop := c.keepAsking(p1)
	c.masters[0].Stop()
	c.opts.backend = "ovn"
	c.startMaster()
	c.eventually("NAT rows on the host's GR", 20*time.Second, func() bool {
		out, _ := c.ovn.NBCtl("--bare", "--columns=_uuid", "find", "NAT", "external_ids:k8s.ovn.org/owner-controller=ovn-egress")
		return out != ""
	})
	c.expectSource(p1, 15*time.Second, only(lb))
	c.masters[1].Stop()
	c.opts.backend = "host"
	c.startMaster()
	c.eventually("NAT rows gone", 20*time.Second, func() bool {
		out, err := c.ovn.NBCtl("--bare", "--columns=_uuid", "find", "NAT", "external_ids:k8s.ovn.org/owner-controller=ovn-egress")
		return err == nil && out == ""
	})
	c.expectSource(p1, 15*time.Second, only(lb))
	stop()
}

func selector(k, v string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
}
