// Package helm tests the Helm chart dist/helm/ovn-egress with the real helm
// CLI (built by `make testbin`, pinned in hack/helm) and a real API server:
// it lints, it renders exactly the plain manifests of dist/ for both
// deployments, and it installs and upgrades as a user would.
package helm

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

const chart = "../../dist/helm/ovn-egress"

var (
	kube *testenv.Kube
	helm string
	img  *testenv.ProductImage
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "helm-kube-")
	if err == nil {
		helm, err = testenv.TestbinPath("helm")
	}
	if err == nil {
		img, err = productImage(dir)
	}
	if err == nil {
		kube, err = testenv.StartKube(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helm:", err) // missing binaries fail the package, never skip it
		os.Exit(1)
	}
	code := m.Run()
	kube.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helmEnv is helm's environment: its state in a temp dir of the test, the
// test's API server.
func helmEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG="+kube.Kubeconfig)
}

// run runs helm and returns stdout; a failure fails the test.
func run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = helmEnv(t)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// TestChartLints: `helm lint` passes in both modes.
func TestChartLints(t *testing.T) {
	for _, set := range []string{"mode=central", "mode=ic"} {
		out := run(t, "lint", chart, "--strict", "--set", set)
		if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint --set %s:\n%s", set, out)
		}
	}
}

// TestChartRendersDist: `helm template` of each mode is, template by
// template, exactly the manifest dist/ holds (dist/ is generated from the
// chart by `make generate`; this fails when one was edited alone).
func TestChartRendersDist(t *testing.T) {
	central := []string{"--set", "mode=central"}
	for _, c := range []struct {
		tpl, file string
		set       []string
	}{
		{"master-rbac.yaml", "../../dist/master/rbac.yaml", central},
		{"master-deployment.yaml", "../../dist/master/deployment.yaml", central},
		{"master-pdb.yaml", "../../dist/master/pdb.yaml", central},
		{"node-rbac.yaml", "../../dist/node/rbac.yaml", central},
		{"node-daemonset.yaml", "../../dist/node/daemonset.yaml", central},
		{"node-admission.yaml", "../../dist/node/admission.yaml", central},
		{"master-admission.yaml", "../../dist/master/admission.yaml", central},
		{"master-rbac.yaml", "../../dist/ic/master-rbac.yaml", nil},
		{"master-deployment.yaml", "../../dist/ic/master-deployment.yaml", nil},
		{"master-pdb.yaml", "../../dist/ic/master-pdb.yaml", nil},
		{"node-rbac.yaml", "../../dist/ic/node-rbac.yaml", nil},
		{"node-daemonset.yaml", "../../dist/ic/node-daemonset.yaml", nil},
		{"node-admission.yaml", "../../dist/ic/node-admission.yaml", nil},
		{"master-admission.yaml", "../../dist/ic/master-admission.yaml", nil},
		{"node-rbac.yaml", "../../dist/egressip/ic-node-rbac.yaml", []string{"--set", "egressIP.enabled=true"}},
		{"node-rbac.yaml", "../../dist/egressip/node-rbac.yaml", []string{"--set", "mode=central", "--set", "egressIP.enabled=true"}},
		{"master-rbac.yaml", "../../dist/egressip/master-rbac.yaml", []string{"--set", "egressIP.enabled=true"}},
		{"network-allowlist.yaml", "../../dist/network-allowlist.yaml", []string{"--set", "networkAllowList.enabled=true"}},
		{"master-networkpolicy.yaml", "../../dist/master/networkpolicy.yaml", central},
		{"master-networkpolicy.yaml", "../../dist/ic/master-networkpolicy.yaml", nil},
		{"node-pools.yaml", "../../dist/node-pools.yaml", []string{"--set", "nodePools.enabled=true"}},
	} {
		args := append([]string{"template", "ovn-egress", chart, "--namespace", "ovn-egress", "--show-only", "templates/" + c.tpl}, c.set...)
		got := body(run(t, args...))
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if want := body(string(b)); got != want {
			t.Errorf("%s %v renders differently from %s (run 'make generate'):\n%s", c.tpl, c.set, c.file, firstDiff(got, want))
		}
	}
	for _, f := range mustGlob(t, "../../dist/crds/*.yaml") {
		a, _ := os.ReadFile(f)
		b, err := os.ReadFile(filepath.Join(chart, "files", "crds", filepath.Base(f)))
		if err != nil || string(a) != string(b) {
			t.Errorf("the chart's files/crds/%s is not dist/crds' (run 'make generate'): %v", filepath.Base(f), err)
		}
	}
}

// body drops helm's leading "---", its "# Source" lines and the generated
// file's header.
func body(s string) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "# Source: ") || (len(out) == 0 && (l == "---" || strings.HasPrefix(l, "# Generated by 'make generate'"))) {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  chart: %q\n  dist:  %q", i+1, x, y)
		}
	}
	return ""
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		t.Fatalf("glob %s: %v %v", pattern, m, err)
	}
	return m
}

// TestChartInstalls: `helm install` with the defaults (interconnect, the
// networks discovered, the CRDs from the chart's templates) is accepted by
// the API server; an upgrade to central with the NB TLS secret and health
// settings is too; values the schema refuses (a mode that does not exist, a
// bad CIDR, a port out of range) are refused by `helm install` before
// anything is written; the uninstall removes the chart's objects and keeps
// the CRDs (deleting a CRD deletes every object of it).
func TestChartInstalls(t *testing.T) {
	ctx := context.Background()
	const ns = "ovn-egress"
	for _, bad := range []struct{ set, want string }{
		{"mode=centrall", "mode"},
		{"clusterSubnets=10.244.0.0", "clusterSubnets"},
		{"metrics.nodePort=70000", "nodePort"},
		{"master.extraArgs={-v}", "extraArgs"},
		{"networkAllowList.networks.Team_A=100", "networkAllowList"},
		{"nodePools.pools.team-a=no-label", "nodePools"},
	} {
		out, err := runErr(t, "install", "ovn-egress-bad", chart, "--namespace", ns, "--create-namespace", "--set", bad.set)
		if err == nil || !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, bad.want) {
			t.Errorf("helm install --set %s: %v\n%s; want refused by the schema, naming %s", bad.set, err, out, bad.want)
		}
	}
	// The CRDs exist already (upstream's, or applied from dist/crds): the
	// chart takes them over as docs/operations.md says — labelled and
	// annotated for the release — and upgrades them from then on.
	for _, args := range [][]string{
		{"label", "crd", "egressservices.k8s.ovn.org", "egressips.k8s.ovn.org", "app.kubernetes.io/managed-by=Helm", "--overwrite"},
		{"annotate", "crd", "egressservices.k8s.ovn.org", "egressips.k8s.ovn.org", "meta.helm.sh/release-name=ovn-egress",
			"meta.helm.sh/release-namespace=ovn-egress", "--overwrite"},
	} {
		if out, err := kube.Kubectl(args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(t, "install", "ovn-egress", chart, "--namespace", ns, "--create-namespace")
	crd, err := kube.Client.Discovery().ServerResourcesForGroupVersion("k8s.ovn.org/v1")
	if err != nil || len(crd.APIResources) == 0 {
		t.Errorf("k8s.ovn.org/v1 after the install: %v", err)
	}
	dep, err := kube.Client.AppsV1().Deployments(ns).Get(ctx, "ovn-egress-master", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--mode=ic") || !slices.Contains(args, "--metrics-address=:9476") ||
		slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cluster-subnets") }) {
		t.Errorf("default master args %v; want interconnect, networks discovered", args)
	}
	if dep.Labels["app.kubernetes.io/instance"] != "ovn-egress" || dep.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("the Deployment's labels %v lack the recommended ones", dep.Labels)
	}
	if sp := dep.Spec.Template.Spec.SecurityContext; sp == nil || sp.SeccompProfile == nil || sp.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("the master pod's seccomp profile: %+v", sp)
	}
	if _, err := kube.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "ovn-egress-master", metav1.GetOptions{}); err != nil {
		t.Errorf("the master's PodDisruptionBudget: %v", err)
	}
	masterNetworkPolicy(t, dep, nil)
	if _, err := kube.Client.RbacV1().ClusterRoles().Get(ctx, "ovn-egress-node", metav1.GetOptions{}); err != nil {
		t.Errorf("node ClusterRole: %v", err)
	}
	for _, p := range []string{"ovn-egress-node", "ovn-egress-master"} {
		if _, err := kube.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, p, metav1.GetOptions{}); err != nil {
			t.Errorf("admission policy %s: %v", p, err)
		}
	}
	if _, err := kube.Egress.K8sV1().EgressServices("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the CRD is not served: %v", err)
	}

	run(t, "upgrade", "ovn-egress", chart, "--namespace", ns, "--set", "mode=central", "--set", "healthCheck.interval=250ms",
		"--set", "healthCheck.timeout=250ms", "--set", "healthCheck.holdDown=1m", "--set", "healthCheck.maxRate=2000", "--set", "image.tag=v1.2.3",
		"--set", "nb.address=tcp:ovnkube-db.ovn-kubernetes.svc:6641", "--set-string", "clusterSubnets=10.244.0.0/16\\,fd00:10:244::/48")
	ds, err := kube.Client.AppsV1().DaemonSets(ns).Get(ctx, "ovn-egress-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if slices.Contains(c.Args, "--zone=$(NODE_NAME)") || c.Image != "ghcr.io/ovn-egress/ovn-egress:v1.2.3" ||
		!slices.Contains(c.Args, "--cluster-subnets=10.244.0.0/16,fd00:10:244::/48") {
		t.Errorf("central node: image %s, args %v", c.Image, c.Args)
	}
	dep, err = kube.Client.AppsV1().Deployments(ns).Get(ctx, "ovn-egress-master", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := dep.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--nb-address=$(OVN_NB_ADDRESS)") || !slices.Contains(args, "--health-interval=250ms") ||
		!slices.Contains(args, "--health-hold-down=1m") || !slices.Contains(args, "--health-max-rate=2000") {
		t.Errorf("central master args %v", args)
	}

	run(t, "upgrade", "ovn-egress", chart, "--namespace", ns, "--set", "mode=central", "--set", "nb.tlsSecret=nb-client", "--set", "nb.address=ssl:ovnkube-db.ovn-kubernetes.svc:6643",
		"--set", "master.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring")
	dep, err = kube.Client.AppsV1().Deployments(ns).Get(ctx, "ovn-egress-master", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	masterNetworkPolicy(t, dep, map[string]string{"name": "monitoring"})
	spec := dep.Spec.Template.Spec
	if !slices.Contains(spec.Containers[0].Args, "--nb-ca-cert=/etc/ovn-egress/nb-tls/ca.crt") || len(spec.Volumes) != 1 || spec.Volumes[0].Secret.SecretName != "nb-client" {
		t.Errorf("TLS master: args %v, volumes %+v", spec.Containers[0].Args, spec.Volumes)
	}

	run(t, "uninstall", "ovn-egress", "--namespace", ns)
	if _, err := kube.Client.AppsV1().Deployments(ns).Get(ctx, "ovn-egress-master", metav1.GetOptions{}); err == nil {
		t.Errorf("the Deployment is still there after uninstall")
	}
	if _, err := kube.Egress.K8sV1().EgressServices("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the CRD went with the uninstall: %v", err)
	}
}

// masterNetworkPolicy checks the installed NetworkPolicy of the master: it
// selects the Deployment's pods, limits their ingress and nothing else, and
// admits connections only to the container's metrics port, from the
// namespaces labelled from (nil: from anywhere).
func masterNetworkPolicy(t *testing.T, dep *appsv1.Deployment, from map[string]string) {
	t.Helper()
	np, err := kube.Client.NetworkingV1().NetworkPolicies(dep.Namespace).Get(context.Background(), "ovn-egress-master", metav1.GetOptions{})
	if err != nil {
		t.Errorf("the master's NetworkPolicy: %v", err)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("the NetworkPolicy's selector %v does not select the master's pods %v (%v)", np.Spec.PodSelector, dep.Spec.Template.Labels, err)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v; want Ingress only", np.Spec.PolicyTypes)
	}
	var metrics int32
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "metrics" {
			metrics = p.ContainerPort
		}
	}
	in := np.Spec.Ingress
	if len(in) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port == nil || in[0].Ports[0].Port.IntValue() != int(metrics) {
		t.Errorf("ingress %+v; want the metrics port %d only", in, metrics)
		return
	}
	switch {
	case from == nil && len(in[0].From) != 0:
		t.Errorf("ingress from %+v; want anywhere", in[0].From)
	case from != nil && (len(in[0].From) != 1 || in[0].From[0].NamespaceSelector == nil ||
		!maps.Equal(in[0].From[0].NamespaceSelector.MatchLabels, from)):
		t.Errorf("ingress from %+v; want namespaces labelled %v", in[0].From, from)
	}
}

// runErr runs helm and returns its combined output and error.
func runErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = helmEnv(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// installCommand reports whether a documented command installs or changes
// the install (kubectl apply, label, annotate, create; helm install,
// upgrade) — what an operator copies to deploy; inspection commands with
// placeholders (kubectl get node NODE) are not run.
func installCommand(l string) bool {
	for _, p := range []string{"kubectl apply ", "kubectl label ", "kubectl annotate ", "kubectl create ", "helm install ", "helm upgrade "} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// documentedCommands are the install commands of README.md and
// docs/*.md's shell blocks, as printed (a trailing "\" joins lines).
func documentedCommands(t *testing.T) []string {
	t.Helper()
	files := append([]string{"../../README.md"}, mustGlob(t, "../../docs/*.md")...)
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in, cont := false, ""
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(l, "```sh"):
				in = true
				continue
			case strings.HasPrefix(l, "```"):
				in = false
				continue
			}
			if !in {
				continue
			}
			l = strings.TrimSpace(cont + l)
			if strings.HasSuffix(l, "\\") {
				cont = strings.TrimSuffix(l, "\\") + " "
				continue
			}
			cont = ""
			if installCommand(l) && !slices.Contains(out, l) { // printed in two places: run once
				out = append(out, l)
			}
		}
	}
	return out
}

// TestDocumentedInstallCommands: every install command (installCommand)
// the README and docs/ print runs verbatim, from the repository's root, against a
// real API server (in the order an operator follows: the CRDs taken over
// for Helm, the Helm install and upgrades, then — after an uninstall — the
// plain manifests, server-side applied), so a document cannot drift from
// what works.
func TestDocumentedInstallCommands(t *testing.T) {
	cmds := documentedCommands(t)
	if len(cmds) < 5 {
		t.Fatalf("found only %d documented commands: %q", len(cmds), cmds)
	}
	phase := func(c string) int {
		switch {
		case strings.HasPrefix(c, "kubectl label crd"), strings.HasPrefix(c, "kubectl annotate crd"):
			return 0
		case strings.HasPrefix(c, "helm install"):
			return 1
		case strings.HasPrefix(c, "helm "):
			return 2
		default:
			return 3
		}
	}
	slices.SortStableFunc(cmds, func(a, b string) int { return phase(a) - phase(b) })
	testbin, err := testenv.TestbinPath("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := append(os.Environ(), "KUBECONFIG="+kube.Kubeconfig, "PATH="+filepath.Dir(testbin)+":"+filepath.Dir(helm)+":"+os.Getenv("PATH"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	sh := func(c string) {
		t.Helper()
		cmd := exec.Command("sh", "-c", c)
		cmd.Dir, cmd.Env = "../..", env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("documented command %q: %v\n%s", c, err, out)
		}
	}
	t.Cleanup(func() { // the plain manifests' cluster-wide objects would collide with the next test's release
		sh("kubectl delete --ignore-not-found -f dist/ic/ -f dist/master/ -f dist/node/")
	})
	uninstalled := false
	for _, c := range cmds {
		if phase(c) == 3 && !uninstalled {
			sh("helm uninstall ovn-egress --namespace ovn-egress --wait")
			uninstalled = true
		}
		sh(c)
		t.Logf("ran: %s", c)
	}
	ctx := context.Background()
	for _, p := range []string{"ovn-egress-node", "ovn-egress-master"} {
		if _, err := kube.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, p, metav1.GetOptions{}); err != nil {
			t.Errorf("the plain manifests applied no admission policy %s: %v", p, err)
		}
	}
	for _, n := range []string{"ovn-egress-master", "ovn-egress-node"} {
		r, err := kube.Client.RbacV1().ClusterRoles().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Errorf("ClusterRole %s: %v", n, err)
			continue
		}
		// EgressIP is opt-in: the documented commands grant none of its
		// access (its RBAC is apart, in dist/egressip/).
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "egressips") || slices.Contains(rule.Resources, "pods") {
				t.Errorf("ClusterRole %s after the documented commands grants %v on %v: EgressIP's access, which is off", n, rule.Verbs, rule.Resources)
			}
		}
	}
}

// TestPlainManifestsWithoutEgressIP: the directories an install applies
// whole (dist/ic, dist/master, dist/node) grant nothing of EgressIP's
// access, which is opt-in; its RBAC is in dist/egressip.
func TestPlainManifestsWithoutEgressIP(t *testing.T) {
	for _, dir := range []string{"ic", "master", "node"} {
		files, err := filepath.Glob(filepath.Join("../../dist", dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("dist/%s: %v %v", dir, files, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `"egressips"`) {
				t.Errorf("%s grants access to egressips: EgressIP's RBAC belongs in dist/egressip", f)
			}
		}
	}
	for _, f := range []string{"master-rbac.yaml", "ic-node-rbac.yaml", "node-rbac.yaml"} {
		if b, err := os.ReadFile(filepath.Join("../../dist/egressip", f)); err != nil || !strings.Contains(string(b), `"egressips"`) {
			t.Errorf("dist/egressip/%s: %v; want EgressIP's access", f, err)
		}
	}
}
