package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestVerifyZones: verify in interconnect, one zone NB at a time, against
// the ovn-kubernetes interconnect topology (three zones, each its own NB).
// The rows each zone should have (written by translate's nbctl commands for
// that zone) verify clean, with --zone and without (the zone is found from
// the NB's gateway routers); then each situation that breaks them in a
// real cluster is reported, and the exit code is 1:
//   - rows a central master would write (a reroute to the host's management
//     port in another zone's NB);
//   - ovn-kubernetes' own EgressSVC reroute in the zone (its feature on, or
//     left behind when turned off);
//   - another controller's untagged priority-101 policy on one of the
//     endpoints (equal priorities: OVN's choice is undefined);
//   - ovn-kubernetes' EgressIP active in the host's zone, which relies on the
//     cluster route ovn-egress owns there: it is to be handed over.
func TestVerifyZones(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	zones := testenv.NewZones(t, topo)
	kube.CreateNodes(t, topo)
	ns := kube.Namespace(t)
	t.Cleanup(func() {
		kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100"}, "10.244.1.5@node1", "10.244.3.5@node3")
	kube.SetHost(t, ns, "web", "node2")
	kube.SetReport(t, "node2", translate.Report{ns + "/web": kube.ReportFor(t, "node2", ns, "web", topo.ClusterSubnets)})
	manifest := exportManifest(t, ns)
	inst, err := testenv.SelectedOVN()
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range zones {
		script, stderr, code := run(t, "translate", "-f", manifest, "--zone", name, "--nb-address", o.NBAddress())
		if code != 0 {
			t.Fatalf("translate --zone %s: exit %d: %s", name, code, stderr)
		}
		sh := exec.Command("sh", "-e", "-c", script)
		sh.Env = append(os.Environ(), "OVN_NB_DB="+o.NBAddress(), "PATH="+inst.PATH())
		if out, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("zone %s: sh -e: %v\n%s", name, err, out)
		}
	}
	verify := func(zone string, flags ...string) (string, int) {
		t.Helper()
		args := append([]string{"verify", "--kubeconfig", kube.Kubeconfig, "--nb-address", zones[zone].NBAddress()}, flags...)
		out, stderr, code := run(t, args...)
		if code == exitError {
			t.Fatalf("verify %s: exit 2: %s", zone, stderr)
		}
		return out, code
	}
	// A tenant's ConfigMap named and labelled like node2's report: not the
	// agent's (another namespace), so verify never reads it.
	spoof := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ovn-egress-report.node2", Namespace: ns,
		Labels: map[string]string{translate.ReportLabel: "", translate.ReportNodeLabel: translate.ReportNodeHash("node2")}},
		Data: map[string]string{translate.ReportNodeKey: "node2", translate.ReportDataKey: "{}"}}
	if _, err := kube.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), spoof, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := listObjects(context.Background(), kube.Config, testenv.ReportNamespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range objs.Reports {
		if r.Namespace != testenv.ReportNamespace {
			t.Errorf("verify read the report ConfigMap %s/%s", r.Namespace, r.Name)
		}
	}
	for name := range zones {
		for _, flags := range [][]string{{"--zone", name}, nil} {
			if out, code := verify(name, flags...); code != 0 || !strings.Contains(out, "no drift") || !strings.Contains(out, "# zone "+name) {
				t.Errorf("zone %s %v, clean rows (and a spoofed report in %s): exit %d\n%s", name, flags, ns, code, out)
			}
		}
	}

	// A central master's row in zone node1: a reroute to node2's management
	// port, which this zone cannot reach.
	node1 := zones["node1"]
	reroute := strings.TrimSpace(node1.MustNBCtl(t, "--bare", "--columns=_uuid", "find", "Logical_Router_Policy",
		`external_ids:"k8s.ovn.org/id"="ovn-egress:EgressServiceHost:node2:v4:reroute"`))
	node1.MustNBCtl(t, "set", "Logical_Router_Policy", reroute, `nexthops="10.244.2.2"`)
	if out, code := verify("node1"); code != 1 || !strings.Contains(out, "different") || !strings.Contains(out, "reroute") {
		t.Errorf("a central master's reroute in a zone: exit %d\n%s", code, out)
	}
	// The same as JSON, for a machine: one object, the same exit code.
	out, code := verify("node1", "-o", "json")
	var doc struct {
		Zone      string       `json:"zone"`
		Drift     []ovn.Change `json:"drift"`
		NoFlow    []any        `json:"noflow"`
		Conflicts []string     `json:"conflicts"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 1 || doc.Zone != "node1" || len(doc.Drift) != 1 ||
		doc.Drift[0].Kind != "different" || !strings.HasSuffix(doc.Drift[0].ID, ":reroute") || doc.NoFlow == nil || doc.Conflicts == nil {
		t.Errorf("verify -o json of the drifted reroute: exit %d, %v, %+v\n%s", code, err, doc, out)
	}
	node1.MustNBCtl(t, "set", "Logical_Router_Policy", reroute, `nexthops="100.88.0.3"`)
	if out, code := verify("node1", "-o", "json"); code != 0 || !strings.Contains(out, `"drift": []`) {
		t.Errorf("verify -o json, clean again: exit %d\n%s", code, out)
	}

	// ovn-kubernetes' own EgressSVC reroute, and another controller's
	// untagged 101 policy on the same endpoint.
	node1.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=101", `match="ip4.src == 10.244.1.5"`,
		"action=reroute", `nexthops="100.88.0.3"`, `external_ids:EgressSVC="`+ns+`/web"`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	out, code = verify("node1")
	if code != 1 || !strings.Contains(out, "conflict") || !strings.Contains(out, "EgressSVC") || !strings.Contains(out, "--enable-egress-service=false") {
		t.Errorf("ovn-kubernetes' EgressSVC row: exit %d\n%s", code, out)
	}
	node1.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=101", `match="ip4.src == 10.244.1.5"`,
		"action=reroute", `nexthops="100.88.0.9"`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	if out, code := verify("node1"); code != 1 || !strings.Contains(out, "also matches endpoint 10.244.1.5") {
		t.Errorf("an untagged 101 policy on an endpoint: exit %d\n%s", code, out)
	}

	// ovn-kubernetes' EgressIP in the host's zone, with no route of its own
	// there: ovn-egress's route stays its own while it wants it (handed
	// over only once it no longer does), so there is no drift.
	node2 := zones["node2"]
	node2.MustNBCtl(t, "--", "--id=@p", "create", "Logical_Router_Policy", "priority=102", `match="ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16"`,
		"action=allow", `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`, `external_ids:"k8s.ovn.org/owner-type"="EgressIP"`,
		`external_ids:"k8s.ovn.org/name"="EIP-No-Reroute-Pod-To-Pod"`, "--", "add", "Logical_Router", "ovn_cluster_router", "policies", "@p")
	if out, code := verify("node2"); code != 0 || !strings.Contains(out, "no drift") {
		t.Errorf("EgressIP beside ovn-egress's cluster route: exit %d\n%s", code, out)
	}
}
