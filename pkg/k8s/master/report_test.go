package master_test

import (
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestReportOfAnOlderAgentRelease: during an upgrade a node whose agent is
// of an older release has its report in the Node's annotation; the master
// reads it there while the node has no report ConfigMap, and prefers the
// ConfigMap once the new agent wrote one (the annotation left behind is
// ignored, whatever it says), and goes back to the annotation when the
// ConfigMap is gone.
func TestReportOfAnOlderAgentRelease(t *testing.T) {
	c := newCluster(t)
	kube.CreateLoadBalancer(t, c.ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	kube.SetHost(t, c.ns, "web", "node2")
	c.start(c.config("legacy-report"), kube.Config)
	key := c.ns + "/web"
	ready := translate.Report{key: kube.ReportFor(t, "node2", c.ns, "web", c.topo.ClusterSubnets)}

	kube.SetLegacyReport(t, "node2", ready)
	c.eventually("endpoints in node2's set from the annotation", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })

	kube.SetReport(t, "node2", translate.Report{})
	c.eventually("the ConfigMap's empty report wins over the annotation", func() bool { return c.setAddresses("node2") == "[]" })

	kube.SetReport(t, "node2", ready)
	c.eventually("the ConfigMap's report", func() bool { return c.setAddresses("node2") == `["10.244.1.5"]` })

	kube.SetLegacyReport(t, "node2", translate.Report{})
	kube.DeleteReport(t, "node2")
	c.eventually("without the ConfigMap the annotation again", func() bool { return c.setAddresses("node2") == "[]" })
}
