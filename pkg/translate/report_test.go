package translate

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestReportConfigMaps: part names, what a part may claim, and the union
// WithReports gives (a ConfigMap naming another node is a problem, not a
// report).
func TestReportConfigMaps(t *testing.T) {
	for _, tc := range []struct {
		node string
		part int
		want string
	}{
		{"node1", 0, "ovn-egress-report.node1"},
		{"node1", 3, "ovn-egress-report-3.node1"},
		{"ip-10-0-0-1.ec2.internal", 1, "ovn-egress-report-1.ip-10-0-0-1.ec2.internal"},
	} {
		got, err := ReportShardName(tc.node, tc.part)
		if err != nil || got != tc.want {
			t.Errorf("ReportShardName(%s, %d) = %q, %v; want %q", tc.node, tc.part, got, err, tc.want)
		}
	}
	if _, err := ReportShardName(strings.Repeat("n", 240), 0); err == nil {
		t.Error("a 240-character node name: no error")
	}
	cm := func(name, node, report string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ovn-egress"},
			Data: map[string]string{ReportNodeKey: node, ReportDataKey: report}}
	}
	for _, bad := range []*corev1.ConfigMap{
		cm("ovn-egress-report.node2", "node1", "{}"),
		cm("ovn-egress-report-0.node1", "node1", "{}"),
		cm("ovn-egress-report-01.node1", "node1", "{}"),
		cm("ovn-egress-report-1.x.node1", "node1", "{}"),
		cm("ovn-egress-report.node1", "", "{}"),
	} {
		if _, _, _, err := ParseReportConfigMap(bad); err == nil {
			t.Errorf("%s claiming node %q: no error", bad.Name, bad.Data[ReportNodeKey])
		}
	}
	info := &NodeInfo{Name: "node1", Problems: []string{ReportAnnotation + ": stale"}, Report: Report{"ns/old": {}}}
	got := WithReports(info, []*corev1.ConfigMap{
		cm("ovn-egress-report.node1", "node1", `{"ns/a":{"eps":"1"}}`),
		cm("ovn-egress-report-1.node1", "node1", `{"ns/b":{"eps":"2"}}`),
	})
	if len(got.Report) != 2 || got.Report["ns/a"].Endpoints != "1" || got.Report["ns/b"].Endpoints != "2" || len(got.Problems) != 0 {
		t.Errorf("WithReports: %+v problems %v", got.Report, got.Problems)
	}
	if len(info.Report) != 1 || len(info.Problems) != 1 {
		t.Errorf("WithReports changed its input: %+v", info)
	}
	if WithReports(info, nil) != info {
		t.Error("no ConfigMap: the Node's annotation is not kept")
	}
}
