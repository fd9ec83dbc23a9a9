package translate

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzParseReport: a report either fails to parse or survives a round
// trip through its encoding unchanged; a report ConfigMap names the node
// and a part 0..n it is for (its entries may still be refused), or no
// node at all.
func FuzzParseReport(f *testing.F) {
	f.Add(`{"ns/web":{"ips":["172.18.0.100"],"eps":"0011223344556677"}}`, "ovn-egress-report.node1", "node1")
	f.Add(`{"ns/web":{"network":"100","eps":""}}`, "ovn-egress-report-3.node1", "node1")
	f.Add(`[]`, "ovn-egress-report-0.node1", "node1")
	f.Add(`{"a":null}`, "ovn-egress-report-03.node1", "")
	f.Fuzz(func(t *testing.T, data, name, node string) {
		r, err := ParseReport(data)
		if err == nil {
			back, err := ParseReport(r.Encode())
			if err != nil || !reflect.DeepEqual(back, r) {
				t.Fatalf("round trip of %q: %v, %v", data, back, err)
			}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{ReportNodeKey: node, ReportDataKey: data}}
		got, part, _, err := ParseReportConfigMap(cm)
		if _, perr := ParseReport(data); err != nil && got != "" && perr == nil {
			t.Fatalf("report of node %q refused although its entries parse: %v", got, err)
		}
		if got != "" && (got != node || part < 0 || !strings.HasSuffix(name, "."+node)) {
			t.Fatalf("ConfigMap %q of node %q read as node %q part %d", name, node, got, part)
		}
	})
}
