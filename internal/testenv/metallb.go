package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// MetalLBNamespace is where MetalLB's objects live, as in its manifests.
const MetalLBNamespace = "metallb-system"

// metalLBSpeakerLabels select the speakers for memberlist, as MetalLB's
// DaemonSet labels its pods.
const metalLBSpeakerLabels = "app=metallb,component=speaker"

// MetalLB runs MetalLB's real controller and speakers (built by `make
// testbin`) against a Kube, for a Dataplane: the controller next to the API
// server, one speaker per node in that node's host namespace — exactly as
// MetalLB's DaemonSet with host networking runs them — with memberlist
// between the nodes' addresses on the external network. The speakers' pods
// exist as objects (no kubelet runs here): memberlist finds its peers by
// their labels and pod IPs.
type MetalLB struct {
	t        testing.TB
	kube     *Kube
	dp       *Dataplane
	dir      string
	bins     map[string]string
	ctrl     *Process
	speakers map[string]*Process
}

// Logs is the tail of the controller's and every speaker's log, for a
// failing test to show.
func (m *MetalLB) Logs(lines int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "metallb-controller:\n%s\n", m.ctrl.Log(lines))
	for _, n := range m.dp.Topo.Nodes {
		if p := m.speakers[n.Name]; p != nil {
			fmt.Fprintf(&b, "metallb-speaker %s:\n%s\n", n.Name, p.Log(lines))
		}
	}
	return b.String()
}

// StartMetalLB installs MetalLB's CRDs and namespace (idempotent), starts
// its controller and a speaker on every node of dp, and stops them when t
// ends.
func StartMetalLB(t testing.TB, k *Kube, dp *Dataplane) *MetalLB {
	t.Helper()
	bins, _, err := metalLBPaths()
	if err != nil {
		t.Fatal(err)
	}
	InstallMetalLBCRDs(t, k)
	m := &MetalLB{t: t, kube: k, dp: dp, dir: shortTempDir(t), bins: bins, speakers: map[string]*Process{}}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if err := os.WriteFile(filepath.Join(m.dir, "secretkey"), []byte(base64.StdEncoding.EncodeToString(secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	m.ctrl = StartProcess(t, m.dir, "metallb-controller", []string{"KUBECONFIG=" + k.Kubeconfig}, bins["metallb-controller"],
		"--namespace="+MetalLBNamespace, "--webhook-mode=disabled", "--disable-cert-rotation", "--log-level=info", "--port=0")
	t.Cleanup(m.ctrl.Kill) // it keeps no state; a graceful stop costs a second per test
	for _, n := range dp.Topo.Nodes {
		if slices.Contains(dp.Topo.Families, ipfamily.V6) {
			waitLinkLocal(t, dp.Hosts[n.Name], "eth0")
		}
		m.StartSpeaker(n.Name)
	}
	return m
}

// InstallMetalLBCRDs installs MetalLB's CRDs and namespace (idempotent)
// without running MetalLB: a test writes MetalLB's objects itself.
func InstallMetalLBCRDs(t testing.TB, k *Kube) {
	t.Helper()
	_, crds, err := metalLBPaths()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctx30()
	defer cancel()
	if err := k.ensureNamespace(ctx, MetalLBNamespace); err != nil {
		t.Fatal(err)
	}
	if err := k.Apply(ctx, crds); err != nil {
		t.Fatalf("MetalLB CRDs: %v", err)
	}
}

// waitLinkLocal waits until dev in ns has its IPv6 link-local address past
// DAD, when IPv6 is on there: a speaker answers NDP only on interfaces that
// have one, and looks again only every 10 s.
func waitLinkLocal(t testing.TB, ns *NetNS, dev string) {
	t.Helper()
	if off, _ := ns.Run("cat", "/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6"); strings.TrimSpace(off) != "0" {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := ns.Run("ip", "-6", "-o", "addr", "show", "dev", dev, "scope", "link")
		if err == nil && strings.Contains(out, "fe80:") && !strings.Contains(out, "tentative") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s has no usable IPv6 link-local address: %s", dev, ns.Name, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartSpeaker starts (again) the speaker of node in its host namespace,
// with the API server forwarded into that namespace.
func (m *MetalLB) StartSpeaker(node string) {
	m.t.Helper()
	h := m.dp.Hosts[node]
	n := m.dp.Topo.Node(node)
	addr := n.HostIPs[0].Addr().String()
	m.ensureSpeakerPod(node, addr)
	if m.speakers[node] == nil {
		m.kube.ForwardInto(m.t, h)
	}
	args := []string{"netns", "exec", h.Name, m.bins["metallb-speaker"], "--node-name=" + node, "--pod-name=speaker-" + node, "--namespace=" + MetalLBNamespace,
		"--host=" + addr, "--ml-bindaddr=" + addr, "--ml-bindport=7946", "--ml-labels=" + metalLBSpeakerLabels,
		"--ml-secret-key-path=" + m.dir, "--log-level=debug"}
	p := StartProcess(m.t, m.dir, "metallb-speaker-"+node, []string{"KUBECONFIG=" + m.kube.Kubeconfig}, m.dp.bins["ip"], args...)
	m.t.Cleanup(p.Kill)
	m.speakers[node] = p
}

// KillSpeaker kills node's speaker (SIGKILL): the node stops announcing
// the moment it dies, without leaving memberlist.
func (m *MetalLB) KillSpeaker(node string) {
	if p := m.speakers[node]; p != nil {
		p.Kill()
	}
}

// ensureSpeakerPod writes the Pod object of node's speaker: host network,
// Running, with the node's address as pod IP.
func (m *MetalLB) ensureSpeakerPod(node, addr string) {
	m.t.Helper()
	ctx, cancel := ctx30()
	defer cancel()
	api := m.kube.Client.CoreV1().Pods(MetalLBNamespace)
	name := "speaker-" + node
	labels := map[string]string{}
	for _, kv := range strings.Split(metalLBSpeakerLabels, ",") {
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = v
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: MetalLBNamespace, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: []corev1.Container{{Name: "speaker", Image: "metallb/speaker:v0.15.3"}}}}
	cur, err := api.Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, err = api.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		m.t.Fatalf("speaker pod %s: %v", name, err)
	}
	cur.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: addr, PodIP: addr, PodIPs: []corev1.PodIP{{IP: addr}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := api.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		m.t.Fatalf("speaker pod %s status: %v", name, err)
	}
}

// ForwardInto makes the API server reachable inside ns at the very address
// its kubeconfig names, for a process run in ns as a host-network pod would
// be (NetNS.ForwardLoopback). It stops when t ends.
func (k *Kube) ForwardInto(t testing.TB, ns *NetNS) {
	t.Helper()
	if _, done := forwarded.LoadOrStore(ns.Name, true); done {
		return // once per namespace: the agent's pod and MetalLB's speaker share a node's
	}
	t.Cleanup(func() { forwarded.Delete(ns.Name) })
	ns.ForwardLoopback(t, strings.TrimPrefix(k.Config.Host, "https://"))
}

// forwarded are the namespaces ForwardInto has forwarded the API server into.
var forwarded sync.Map

func (k *Kube) ensureNamespace(ctx context.Context, name string) error {
	_, err := k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	return nil
}

// metalLBPaths finds the binaries and CRDs `make testbin` put in
// $TESTBIN_DIR (or bin/testbin).
func metalLBPaths() (map[string]string, string, error) {
	dir := os.Getenv("TESTBIN_DIR")
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return nil, "", err
		}
		dir = filepath.Join(root, "bin", "testbin")
	}
	bins := map[string]string{}
	var missing []string
	for _, n := range []string{"metallb-controller", "metallb-speaker"} {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, n)
		}
		bins[n] = p
	}
	crds := filepath.Join(dir, "metallb-crds")
	if _, err := os.Stat(crds); err != nil {
		missing = append(missing, "metallb-crds/")
	}
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("%w: %s not found in %s; build them with `make testbin` (MetalLB's controller, speaker and CRDs, pinned in hack/metallb)",
			errMissing, strings.Join(missing, ", "), dir)
	}
	return bins, crds, nil
}

// WaitSpeakerSynced waits until node's speaker has loaded MetalLB's
// configuration and gone through the Services once (its "config reloaded"),
// after which it answers, or not, by what it has seen.
func (m *MetalLB) WaitSpeakerSynced(node string) {
	m.t.Helper()
	p := m.speakers[node]
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.Output(), `"event":"config reloaded"`) { // this run's, not a killed one's
		if err := p.Exited(); err != nil || time.Now().After(deadline) {
			m.t.Fatalf("speaker of %s not synced: %v\n%s", node, err, p.Log(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
