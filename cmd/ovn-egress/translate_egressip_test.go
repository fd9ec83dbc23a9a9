package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TestTranslateEgressIP: `translate -f` of Nodes, a Namespace, Pods and an
// EgressIP assigned to node2 prints ovn-nbctl commands that, run with sh
// -e against an NB with the ovn-kubernetes topology, reroute exactly the
// selected pod to node2's gateway router and SNAT it there to the egress
// IP (ovn-trace), while the namespace's other pod leaves as before; the
// yaml output holds the same rows, and per zone (interconnect) the pod's
// zone reroutes it and the egress node's zone SNATs it.
func TestTranslateEgressIP(t *testing.T) {
	o := testenv.NewOVN(t)
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	o.BuildTopology(t, topo)
	const eip = "172.18.0.240"
	selected, other := topo.Nodes[0].PodIP(ipfamily.V4, 5), topo.Nodes[0].PodIP(ipfamily.V4, 6)
	pod := func(name string, ip netip.Addr, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "batch", Labels: labels},
			Spec:       corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}}
	}
	objs := []any{
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "batch", Labels: map[string]string{"team": "batch"}}},
		pod("job", selected, map[string]string{"app": "job"}), pod("web", other, map[string]string{"app": "web"}),
		&egressipv1.EgressIP{TypeMeta: metav1.TypeMeta{APIVersion: "k8s.ovn.org/v1", Kind: "EgressIP"}, ObjectMeta: metav1.ObjectMeta{Name: "batch"},
			Spec: egressipv1.EgressIPSpec{EgressIPs: []string{eip}, NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "batch"}},
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "job"}}},
			Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: "node2", EgressIP: eip}}}},
	}
	manifest := writeManifest(t, append(objs, nodeObjects(topo)...))
	subnets := []string{"--cluster-subnets", "10.244.0.0/16", "--join-subnets", "100.64.0.0/16", "--service-cidrs", "10.96.0.0/16"}
	script, stderr, code := run(t, append([]string{"translate", "-f", manifest}, subnets...)...)
	if code != 0 || !strings.Contains(script, eip) {
		t.Fatalf("translate: exit %d, no row with the egress IP:\n%s\n%s", code, script, stderr)
	}
	sh := exec.Command("sh", "-e", "-c", script)
	inst, err := testenv.SelectedOVN()
	if err != nil {
		t.Fatal(err)
	}
	sh.Env = append(os.Environ(), "OVN_NB_DB="+o.NBAddress(), "PATH="+inst.PATH())
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("sh -e: %v\n%s\n%s", err, out, script)
	}
	o.MustNBCtl(t, "--wait=sb", "sync")
	o.AddPod(t, "node1", "job", selected)
	o.AddPod(t, "node1", "web", other)
	o.MustNBCtl(t, "--wait=sb", "sync")
	// The external gateway's MAC is known (else the trace ends in its ARP
	// request, before the SNAT).
	dp := strings.TrimSpace(o.MustSBCtl(t, "--bare", "--columns=_uuid", "find", "Datapath_Binding", "external_ids:name=GR_node2"))
	o.MustSBCtl(t, "create", "MAC_Binding", "logical_port=rtoe-GR_node2", "ip="+topo.ExternalGateways[0].String(), `mac="0a:58:ac:12:00:fe"`, "datapath="+dp)
	trace := func(name string, ip netip.Addr) string {
		t.Helper()
		out, err := o.Trace("node1", fmt.Sprintf(`inport == "node1_%s" && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == 8.8.8.8 && ip.ttl == 64 && tcp`,
			name, testenv.MAC(ip), testenv.MAC(topo.Nodes[0].Subnets[0].Addr().Next()), ip))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	join2 := topo.Nodes[1].JoinIPs[0].Addr().String()
	if out := trace("job", selected); !strings.Contains(out, "reg0 = "+join2) || !strings.Contains(out, "ct_snat("+eip) {
		t.Errorf("the selected pod is not rerouted to node2's GR (%s) and SNATed to %s:\n%s", join2, eip, out)
	}
	if out := trace("web", other); strings.Contains(out, "reg0 = "+join2) || strings.Contains(out, eip) {
		t.Errorf("the pod the EgressIP does not select is rerouted or SNATed to the egress IP:\n%s", out)
	}

	// The same rows in yaml; per zone in interconnect.
	if y, _, code := run(t, append([]string{"translate", "-f", manifest, "-o", "yaml"}, subnets...)...); code != 0 || !strings.Contains(y, eip) || !strings.Contains(y, "EgressIP") {
		t.Errorf("yaml: exit %d\n%s", code, y)
	}
	// Interconnect: the same objects with the nodes' transit addresses.
	ic := testenv.DefaultTopology(3, ipfamily.V4)
	ic.Interconnect = true
	icManifest := writeManifest(t, append(objs, nodeObjects(ic)...))
	transit2 := ic.Nodes[1].TransitIPs[0].Addr().String()
	for zone, want := range map[string]string{"node1": transit2, "node2": eip} {
		out, stderr, code := run(t, append([]string{"translate", "-f", icManifest, "--zone", zone}, subnets...)...)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("zone %s: exit %d, want %q:\n%s\n%s", zone, code, want, out, stderr)
		}
	}
}

// nodeObjects are the Node objects of topo, as manifests hold them.
func nodeObjects(topo testenv.Topology) []any {
	var out []any
	for _, n := range topo.Nodes {
		node := topo.NodeObject(n)
		node.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}
		out = append(out, node)
	}
	return out
}

// writeManifest writes objs as one YAML file of several documents.
func writeManifest(t *testing.T, objs []any) string {
	t.Helper()
	var docs []string
	for _, obj := range objs {
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	p := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(p, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
