package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

var kube *testenv.Kube

func TestMain(m *testing.M) { os.Exit(testenv.RunWithKube(m, "oe-cli-", &kube)) }

// run runs the CLI in-process and returns stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	app := newApp()
	var out, errb bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errb
	err := app.RunContext(context.Background(), append([]string{"ovn-egress"}, args...))
	code := 0
	if err != nil {
		code = exitCode(err)
		fmt.Fprintln(&errb, err)
	}
	return out.String(), errb.String(), code
}

func TestTranslateExamples(t *testing.T) {
	out, stderr, code := run(t, "translate", "-f", "../../examples/")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"create Address_Set", `'addresses="10.244.1.5","10.244.3.5"'`, "reroute", `'nexthops="10.244.2.2"'`, "add Logical_Router ovn_cluster_router policies @p"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, format := range []string{"yaml", "ovsdb-json"} {
		if _, stderr, code := run(t, "translate", "-f", "../../examples/", "-o", format); code != 0 {
			t.Errorf("-o %s: exit %d: %s", format, code, stderr)
		}
	}
}

// TestTranslateSelectHosts: hosts are chosen offline for EgressServices
// without one, by the selector and the nodes' labels.
func TestTranslateSelectHosts(t *testing.T) {
	dir := t.TempDir()
	es := filepath.Join(dir, "es.yaml")
	os.WriteFile(es, []byte("apiVersion: k8s.ovn.org/v1\nkind: EgressService\nmetadata: {name: web, namespace: shop}\nspec:\n  nodeSelector: {matchLabels: {egress: \"true\"}}\n"), 0o644)
	out, stderr, code := run(t, "translate", "--select-hosts", "-f", "../../examples/nodes.yaml", "-f", "../../examples/web.yaml", "-o", "yaml")
	if code != 0 || !strings.Contains(out, "# host shop/web: node2") {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	// examples/web.yaml sets status.host; without it the choice comes from
	// the selector (node2 is the only node labelled egress=true).
	svc := filepath.Join(dir, "svc.yaml")
	b, _ := os.ReadFile("../../examples/web.yaml")
	doc := strings.Split(string(b), "---\n")
	os.WriteFile(svc, []byte(strings.Join(doc[:len(doc)-1], "---\n")), 0o644)
	out, stderr, code = run(t, "translate", "--select-hosts", "-f", "../../examples/nodes.yaml", "-f", svc, "-f", es)
	if code != 0 || !strings.Contains(out, "# host shop/web: node2") || !strings.Contains(out, `nexthops="10.244.2.2"`) {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
}

// TestTranslateZones: interconnect manifests print every zone's rows, each
// headed by its zone; --zone prints one.
func TestTranslateZones(t *testing.T) {
	dir := t.TempDir()
	b, _ := os.ReadFile("../../examples/nodes.yaml")
	nodes := strings.ReplaceAll(string(b), "k8s.ovn.org/node-id:", "k8s.ovn.org/node-transit-switch-port-ifaddr: '{\"ipv4\":\"100.88.0.9/16\"}'\n    k8s.ovn.org/node-id:")
	os.WriteFile(filepath.Join(dir, "nodes.yaml"), []byte(nodes), 0o644)
	out, stderr, code := run(t, "translate", "-f", filepath.Join(dir, "nodes.yaml"), "-f", "../../examples/web.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, z := range []string{"# zone node1", "# zone node2", "# zone node3"} {
		if !strings.Contains(out, z) {
			t.Errorf("no %q block:\n%s", z, out)
		}
	}
	out, _, code = run(t, "translate", "--zone", "node1", "-f", filepath.Join(dir, "nodes.yaml"), "-f", "../../examples/web.yaml")
	if code != 0 || strings.Contains(out, "# zone node2") || !strings.Contains(out, `nexthops="100.88.0.9"`) || !strings.Contains(out, `addresses="10.244.1.5"`) {
		t.Errorf("zone node1:\n%s", out)
	}
}

func TestTranslateBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  type: [oops\n"), 0o644)
	_, stderr, code := run(t, "translate", "-f", bad)
	if code != 2 || !strings.Contains(stderr, "bad.yaml:11:") {
		t.Errorf("exit %d, stderr %q; want 2 and the file and line", code, stderr)
	}
	_, stderr, code = run(t, "translate", "-f", filepath.Join(dir, "missing.yaml"))
	if code != 2 || !strings.Contains(stderr, "missing.yaml") {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
	// A problem is not an error: exit 0, one line on stderr naming the object.
	ok := filepath.Join(dir, "ok.yaml")
	os.WriteFile(ok, []byte("apiVersion: k8s.ovn.org/v1\nkind: EgressService\nmetadata:\n  name: lonely\n  namespace: ns\nstatus:\n  host: node1\n"), 0o644)
	_, stderr, code = run(t, "translate", "-f", ok)
	if code != 0 || !strings.Contains(stderr, "ns/lonely: ServiceNotFound") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestTranslateNBCtlThenVerify: the objects of a cluster, exported as
// manifests, translated offline to ovn-nbctl commands and run with sh -e
// against a fresh NB with the topology, leave NB exactly as the master
// wants it: verify (which computes what the master computes, from the live
// API) reports no drift, and finds a logical flow of each of its policies
// and NAT rows in the SB; a row northd cannot use makes it report that
// row; removing one row makes it report that row.
func TestTranslateNBCtlThenVerify(t *testing.T) {
	for _, backend := range []string{"host", "ovn"} {
		t.Run(backend, func(t *testing.T) {
			o := testenv.NewOVN(t)
			topo := testenv.DefaultTopology(3, ipfamily.V4, ipfamily.V6)
			o.BuildTopology(t, topo)
			kube.CreateNodes(t, topo)
			ns := kube.Namespace(t)
			t.Cleanup(func() {
				kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
			})
			kube.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100", "fc00:f853:ccd:e793::100"},
				"10.244.1.5@node1", "fd00:10:244:3::5@node3")
			kube.SetHost(t, ns, "web", "node2")
			kube.SetReport(t, "node2", translate.Report{ns + "/web": kube.ReportFor(t, "node2", ns, "web", topo.ClusterSubnets)})

			manifest := exportManifest(t, ns)
			// The networks given to both: offline, translate cannot find the
			// cluster's (verify would, from the API server's ServiceCIDRs).
			subnets := []string{"--cluster-subnets", "10.244.0.0/16,fd00:10:244::/48", "--service-cidrs", "10.96.0.0/16",
				"--join-subnets", "100.64.0.0/16", "--snat-backend", backend}
			xlate := append([]string{"translate", "-f", manifest}, subnets...)
			if backend == "ovn" {
				// The gateway path's rows depend on the NB (its GRs' SNAT, and
				// NAT.match on OVN ≥ 24.09): read them as the master does.
				xlate = append(xlate, "--nb-address", o.NBAddress())
			}
			script, stderr, code := run(t, xlate...)
			if code != 0 {
				t.Fatalf("translate: exit %d: %s", code, stderr)
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
			verifyArgs := append([]string{"verify", "--kubeconfig", kube.Kubeconfig, "--nb-address", o.NBAddress()}, subnets...)
			out, stderr, code := run(t, verifyArgs...)
			if code != 0 || !strings.Contains(out, "no drift") {
				t.Fatalf("verify: exit %d\n%s\n%s", code, out, stderr)
			}
			// northd drops what it cannot use, and says so only in its log:
			// with node2's router port gone, the reroutes to node2's
			// management port reach nothing (host backend); with GR_node2
			// bound to no chassis it is no gateway router and its NAT rows
			// do nothing (ovn backend). NB is unchanged; verify reads the SB.
			var broken []string
			if backend == "host" {
				broken = []string{"lrp-del", "rtos-node2"}
			} else {
				broken = []string{"remove", "Logical_Router", "GR_node2", "options", "chassis"}
			}
			o.MustNBCtl(t, append([]string{"--wait=sb"}, broken...)...)
			out, _, code = run(t, verifyArgs...)
			wantTable := map[string]string{"host": "Logical_Router_Policy", "ovn": "NAT"}[backend]
			if code != 1 || !strings.Contains(out, "noflow     "+wantTable+" ") || strings.Contains(out, "missing") {
				t.Errorf("verify after %v: exit %d, want 1 and noflow %s rows (and no drift)\n%s", broken, code, wantTable, out)
			}
			if none, _, code := run(t, append(verifyArgs, "--sb-address=none")...); code != 0 {
				t.Errorf("verify --sb-address=none: exit %d, want 0 (NB itself did not change)\n%s", code, none)
			}
			o.MustNBCtl(t, "--if-exists", "destroy", "Address_Set", translate.AddressSetName("ovn-egress:EgressServiceHost:node2:v4"))
			if backend == "ovn" {
				o.MustNBCtl(t, "--if-exists", "destroy", "Address_Set", translate.AddressSetName("ovn-egress:EgressServiceGateway:node2:v4"))
			}
			out, _, code = run(t, verifyArgs...)
			if code != 1 || !strings.Contains(out, "missing") || !strings.Contains(out, "Address_Set") {
				t.Errorf("verify after removing a row: exit %d\n%s", code, out)
			}
		})
	}
}

// exportManifest writes the cluster's objects (all namespaces' Nodes, and
// ns's Services, EndpointSlices and EgressServices) as one YAML file.
func exportManifest(t *testing.T, ns string) string {
	ctx := context.Background()
	var docs []string
	add := func(kind, apiVersion string, items []any) {
		for _, it := range items {
			b, err := yaml.Marshal(it)
			if err != nil {
				t.Fatal(err)
			}
			doc := string(b)
			if !strings.Contains(doc, "\nkind: ") && !strings.HasPrefix(doc, "kind: ") {
				doc = "apiVersion: " + apiVersion + "\nkind: " + kind + "\n" + doc
			}
			docs = append(docs, doc)
		}
	}
	nodes, _ := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	svcs, _ := kube.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	eps, _ := kube.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	ess, _ := kube.Egress.K8sV1().EgressServices(ns).List(ctx, metav1.ListOptions{})
	var items []any
	for i := range nodes.Items {
		items = append(items, &nodes.Items[i])
	}
	add("Node", "v1", items)
	items = nil
	for i := range svcs.Items {
		items = append(items, &svcs.Items[i])
	}
	add("Service", "v1", items)
	items = nil
	for i := range eps.Items {
		items = append(items, &eps.Items[i])
	}
	add("EndpointSlice", "discovery.k8s.io/v1", items)
	items = nil
	for i := range ess.Items {
		items = append(items, &ess.Items[i])
	}
	add("EgressService", "k8s.ovn.org/v1", items)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTranslateDualStackDefaults: a dual-stack cluster's manifests
// translated with the default --cluster-subnets (IPv4 only) print the IPv4
// rows and name the IPv6 endpoint left out, with the flag to set — as a new
// user tried it; with the IPv6 network given the problem is gone.
func TestTranslateDualStackDefaults(t *testing.T) {
	topo := testenv.DefaultTopology(3, ipfamily.V4, ipfamily.V6)
	kube.CreateNodes(t, topo)
	ns := kube.Namespace(t)
	t.Cleanup(func() {
		kube.Egress.K8sV1().EgressServices(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube.CreateLoadBalancer(t, ns, "web", []string{"172.18.0.100", "fc00:f853:ccd:e793::100"}, "10.244.1.5@node1", "fd00:10:244:3::5@node3")
	kube.SetHost(t, ns, "web", "node2")
	manifest := exportManifest(t, ns)
	out, stderr, code := run(t, "translate", "-f", manifest)
	if code != 0 || !strings.Contains(out, "10.244.1.5") {
		t.Fatalf("translate: exit %d, stdout lacks the IPv4 endpoint:\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(stderr, ns+"/web: EndpointOutsideClusterSubnets") || !strings.Contains(stderr, "fd00:10:244:3::5") ||
		!strings.Contains(stderr, "--cluster-subnets") {
		t.Errorf("stderr does not name the IPv6 endpoint left out and the flag:\n%s", stderr)
	}
	out, stderr, code = run(t, "translate", "-f", manifest, "--cluster-subnets", "10.244.0.0/16,fd00:10:244::/48")
	if code != 0 || strings.Contains(stderr, "EndpointOutsideClusterSubnets") || !strings.Contains(out, "fd00:10:244:3::5") {
		t.Errorf("with both networks: exit %d, the IPv6 endpoint missing or still a problem:\n%s\n%s", code, out, stderr)
	}
}
