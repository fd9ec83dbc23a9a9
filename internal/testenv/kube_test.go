package testenv

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

// TestKube starts the package's one control plane and checks everything the
// other packages rely on, then that Stop ends it in order and gracefully.
func TestKube(t *testing.T) {
	start := time.Now()
	k := NewKube(t)
	t.Logf("control plane ready (CRDs installed) in %s", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("version", func(t *testing.T) {
		v, err := k.Client.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.37.2" {
			t.Errorf("server version %q; want v1.37.2", v.GitVersion)
		}
		out, err := k.Kubectl("version", "-o", "yaml")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(out, "gitVersion: v1.37.2") != 2 {
			t.Errorf("kubectl version: got\n%s\nwant client and server v1.37.2", out)
		}
	})

	t.Run("loopback only", func(t *testing.T) {
		if !strings.HasPrefix(k.Config.Host, "https://127.0.0.1:") {
			t.Errorf("host %q; want https://127.0.0.1:PORT", k.Config.Host)
		}
	})

	t.Run("CRDs served", func(t *testing.T) {
		if _, err := k.Egress.K8sV1().EgressServices("default").List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list egressservices: %v", err)
		}
		out, err := k.Kubectl("get", "crd", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/egressservices.k8s.ovn.org") {
			t.Errorf("kubectl get crd: got %q; want egressservices.k8s.ovn.org", out)
		}
	})

	t.Run("dual-stack ClusterIPs", func(t *testing.T) {
		ns := k.Namespace(t)
		policy := corev1.IPFamilyPolicyRequireDualStack
		svc, err := k.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "dual"},
			Spec: corev1.ServiceSpec{IPFamilyPolicy: &policy,
				Ports: []corev1.ServicePort{{Port: 80}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, ip := range svc.Spec.ClusterIPs {
			a := netip.MustParseAddr(ip)
			cidr := netip.MustParsePrefix(strings.Split(ServiceCIDRs, ",")[i])
			if !cidr.Contains(a) {
				t.Errorf("ClusterIP %s not in %s", a, cidr)
			}
			got = append(got, ip)
		}
		if len(got) != 2 {
			t.Errorf("ClusterIPs %v; want one IPv4 and one IPv6", got)
		}
	})

	t.Run("Namespace", func(t *testing.T) {
		a, b := k.Namespace(t), k.Namespace(t)
		if a == b || !strings.HasPrefix(a, "testkube-namespace-") {
			t.Errorf("namespaces %q, %q; want two different names starting testkube-namespace-", a, b)
		}
		for _, ns := range []string{a, b} {
			if _, err := k.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				t.Errorf("get namespace: %v", err)
			}
		}
	})

	t.Run("Apply and a ServiceAccount", func(t *testing.T) {
		testApplyAndServiceAccount(ctx, t, k)
	})

	t.Run("Stop", func(t *testing.T) {
		start := time.Now()
		k.Stop()
		took := time.Since(start)
		for _, d := range []*daemon{k.apiserver, k.etcd} {
			ws := d.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				t.Errorf("%s was killed; want a graceful exit on SIGTERM", d.name)
			}
		}
		t.Logf("stopped in %s", took.Round(time.Millisecond))
	})
}

// testApplyAndServiceAccount applies a manifest directory with a CRD and a
// custom resource of it, RBAC and a Deployment, then acts as the
// ServiceAccount it grants rights to.
func testApplyAndServiceAccount(ctx context.Context, t *testing.T, k *Kube) {
	dir := t.TempDir()
	suffix, err := randomHex(4)
	if err != nil {
		t.Fatal(err)
	}
	ns := "apply-" + suffix // created by the manifest itself
	write := func(name, content string) {
		t.Helper()
		content = strings.ReplaceAll(content, "NS", ns)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The custom resource comes before its CRD and the Role before its
	// Namespace: Apply orders them.
	write("a-widget.yaml", `
apiVersion: example.test/v1
kind: Widget
metadata: {name: w1, namespace: NS}
spec: {size: 3}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: c1, namespace: NS}, data: {k: v1}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: c2, namespace: NS}, data: {k: v1}}
`)
	write("b-rbac.yaml", `
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader, namespace: NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-egress, namespace: NS}
rules:
- {apiGroups: [k8s.ovn.org], resources: [egressservices], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: NS}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-egress}
subjects:
- {kind: ServiceAccount, name: reader, namespace: NS}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ovn-egress, namespace: NS}
spec:
  selector: {matchLabels: {app: ovn-egress}}
  template:
    metadata: {labels: {app: ovn-egress}}
    spec:
      serviceAccountName: reader
      containers: [{name: c, image: example.invalid/ovn-egress:dev}]
`)
	write("c-crd.json", `{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
 "metadata": {"name": "widgets.example.test"},
 "spec": {"group": "example.test", "scope": "Namespaced",
  "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
  "versions": [{"name": "v1", "served": true, "storage": true,
   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}`)
	write("d-namespace.yml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: NS}\n")
	write("ignored.txt", "not a manifest")

	if err := k.Apply(ctx, dir); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	widgets := schema.GroupVersionResource{Group: "example.test", Version: "v1", Resource: "widgets"}
	w, err := k.Dynamic.Resource(widgets).Namespace(ns).Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get widget: %v", err)
	}
	if size := w.Object["spec"].(map[string]any)["size"]; size != int64(3) {
		t.Errorf("widget spec.size %v; want 3", size)
	}
	if _, err := k.Client.AppsV1().Deployments(ns).Get(ctx, "ovn-egress", metav1.GetOptions{}); err != nil {
		t.Errorf("get deployment: %v", err)
	}

	// Applying again updates.
	write("a-widget.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c2, namespace: NS}\ndata: {k: v2}\n")
	if err := k.Apply(ctx, filepath.Join(dir, "a-widget.yaml")); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
	for name, want := range map[string]string{"c1": "v1", "c2": "v2"} {
		cm, err := k.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["k"] != want {
			t.Errorf("ConfigMap %s data.k = %q; want %q", name, cm.Data["k"], want)
		}
	}
	if err := k.Apply(ctx, filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Apply of a missing file: got no error")
	}

	cfg, err := k.ServiceAccountConfig(ctx, ns, "reader")
	if err != nil {
		t.Fatal(err)
	}
	egress, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := egress.K8sV1().EgressServices(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("service account lists egressservices in %s: %v; want allowed", ns, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account lists nodes: %v; want Forbidden", err)
	}
	// A ServiceAccount that does not exist yet is created.
	if _, err := k.ServiceAccountConfig(ctx, ns, "fresh"); err != nil {
		t.Errorf("ServiceAccountConfig of a new account: %v", err)
	}

	path := filepath.Join(t.TempDir(), "reader.kubeconfig")
	if err := k.KubeconfigFor(cfg, path); err != nil {
		t.Fatal(err)
	}
	out, err := k.Kubectl("--kubeconfig="+path, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if want := "system:serviceaccount:" + ns + ":reader"; err != nil || out != want {
		t.Errorf("kubectl auth whoami as the service account: %q, %v; want %q", out, err, want)
	}
	if _, err := k.Kubectl("--kubeconfig="+path, "get", "nodes"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("kubectl get nodes as the service account: %v; want Forbidden", err)
	}
}

// TestStartKubeFailsFast: when etcd or kube-apiserver exits while starting,
// StartKube says so at once, with the end of its log, and leaves nothing
// running.
func TestStartKubeFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts kubeOptions
		want []string
	}{
		{"etcd", kubeOptions{etcdArgs: []string{"--data-dir=/proc/no-such-dir/etcd"}},
			[]string{"etcd exited", "cannot access data directory"}},
		{"kube-apiserver", kubeOptions{apiserverArgs: []string{"--no-such-apiserver-flag"}},
			[]string{"kube-apiserver exited", "unknown flag: --no-such-apiserver-flag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			k, err := startKube(t.TempDir(), tc.opts)
			took := time.Since(start)
			if err == nil {
				k.Stop()
				t.Fatal("startKube: got no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to contain %q", err, w)
				}
			}
			// Fast: the failure is seen, not waited out (the readiness
			// wait is a minute).
			if took > 45*time.Second {
				t.Errorf("failed after %s; want the failure seen before the minute's readiness wait ends", took)
			}
			for _, d := range []*daemon{k.etcd, k.apiserver} {
				if d != nil && d.exited() == nil {
					t.Errorf("%s still running after the failed start", d.name)
				}
			}
		})
	}
}

// TestStartKubeMissingBinaries: missing binaries are an error that says how
// to build them, never a skip.
func TestStartKubeMissingBinaries(t *testing.T) {
	t.Setenv("TESTBIN_DIR", t.TempDir())
	k, err := StartKube(t.TempDir())
	if err == nil {
		k.Stop()
		t.Fatal("StartKube: got no error")
	}
	if !errors.Is(err, errMissing) {
		t.Errorf("error %v; want errMissing", err)
	}
	for _, w := range []string{"etcd, kube-apiserver, kubectl not found", "make testbin"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q; want it to contain %q", err, w)
		}
	}
}

func TestDNSPrefix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"TestKube/Apply_and_a_ServiceAccount", 40, "testkube-apply-and-a-serviceaccount"},
		{"TestX/a__b", 6, "testx"},
		{"9lives", 40, "t9lives"},
		{"___", 40, "t"},
	} {
		if got := dnsPrefix(tc.in, tc.max); got != tc.want {
			t.Errorf("dnsPrefix(%q, %d) = %q; want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
