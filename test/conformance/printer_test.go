package conformance

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// The printer columns, read as a Table and through kubectl, show status.host
// and the Ready condition's status and reason as written through /status.
func TestPrinterColumns(t *testing.T) {
	t.Parallel()
	ns := kube.Namespace(t)
	web := setHost(t, create(t, ns, "web", egressv1.EgressServiceSpec{SourceIPBy: egressv1.LoadBalancerIP}), "node-a")
	web.Status.Conditions = []metav1.Condition{
		{Type: "HostAssigned", Status: metav1.ConditionTrue, Reason: "HostAssigned", Message: "host is node-a", LastTransitionTime: metav1.Now()},
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "AgentNotReady", Message: "AgentsReady: not yet", LastTransitionTime: metav1.Now()},
	}
	if _, err := kube.Egress.K8sV1().EgressServices(ns).UpdateStatus(t.Context(), web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	setHost(t, create(t, ns, "net", egressv1.EgressServiceSpec{SourceIPBy: egressv1.Network, Network: "blue"}), egressv1.HostAll)
	create(t, ns, "pending", egressv1.EgressServiceSpec{})

	t.Run("Table", func(t *testing.T) {
		resp := do(t, admin(), request{method: http.MethodGet, path: collectionPath(ns), accept: tableAccept})
		var table metav1.Table
		if err := json.Unmarshal(resp.body, &table); err != nil || resp.code != http.StatusOK {
			t.Fatalf("GET as Table: %d %v %v", resp.code, resp.err, err)
		}
		var cols []string
		for _, c := range table.ColumnDefinitions {
			cols = append(cols, c.Name+":"+c.Type)
		}
		if want := []string{"Name:string", "Assigned Host:string", "Source IP By:string", "Ready:string", "Reason:string", "Age:date"}; table.Kind != "Table" || !slices.Equal(cols, want) {
			t.Errorf("kind %q columns %v; want Table %v", table.Kind, cols, want)
		}
		var rows []string
		for _, r := range table.Rows {
			if len(r.Cells) != 6 || r.Cells[5] == "" {
				t.Errorf("row %v; want 6 cells with an age", r.Cells)
				continue
			}
			rows = append(rows, strings.Join([]string{str(r.Cells[0]), str(r.Cells[1]), str(r.Cells[2]), str(r.Cells[3]), str(r.Cells[4])}, " "))
		}
		if want := []string{"net ALL Network <nil> <nil>", "pending <nil> <nil> <nil> <nil>", "web node-a LoadBalancerIP False AgentNotReady"}; !slices.Equal(rows, want) {
			t.Errorf("rows %q; want %q", rows, want)
		}

		resp = do(t, admin(), request{method: http.MethodGet, path: collectionPath(ns, "web"), accept: tableAccept})
		if err := json.Unmarshal(resp.body, &table); err != nil || len(table.Rows) != 1 || table.Rows[0].Cells[1] != "node-a" {
			t.Errorf("GET one object as Table: %d %v %s; want one row with node-a", resp.code, err, resp.body)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		out, err := kube.Kubectl("get", "egressservices", "-o", "wide", "-n", ns)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !regexp.MustCompile(`^NAME\s+ASSIGNED HOST\s+SOURCE IP BY\s+READY\s+REASON\s+AGE$`).MatchString(lines[0]) {
			t.Fatalf("kubectl get -o wide:\n%s\nwant the header NAME ASSIGNED HOST SOURCE IP BY READY REASON AGE and 3 rows", out)
		}
		var rows []string
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			rows = append(rows, strings.Join(f[:len(f)-1], " ")) // without the age
		}
		if want := []string{"net ALL Network", "pending", "web node-a LoadBalancerIP False AgentNotReady"}; !slices.Equal(rows, want) {
			t.Errorf("kubectl get -o wide rows %q; want %q\n%s", rows, want, out)
		}

		out, err = kube.Kubectl("get", "egressservice", "web", "-n", ns, "--no-headers", "-o", "custom-columns=HOST:.status.host")
		if err != nil || strings.TrimSpace(out) != "node-a" {
			t.Errorf("kubectl get custom-columns: %q, %v; want node-a", out, err)
		}
	})
}

func str(v any) string {
	if v == nil {
		return "<nil>"
	}
	s, _ := v.(string)
	return s
}
