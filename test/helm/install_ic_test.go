package helm

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// productImage builds the image of this tree (make image; the Debian root
// is reused) and unpacks it.
func productImage(dir string) (*testenv.ProductImage, error) {
	if out, err := exec.Command("../../hack/image.sh").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make image: %v\n%s", err, out)
	}
	archive, err := testenv.ImageArchive()
	if err != nil {
		return nil, err
	}
	return testenv.UnpackProductImage(archive, dir)
}

// TestHelmInstallInterconnect: `helm install` with the chart's defaults
// and only the zones' NB address, on a cluster as current ovn-kubernetes
// runs it — interconnect, three zones each with its own real NB, SB and
// northd and the topology of its node, ovn-kubernetes' ovn-config
// ConfigMap — and the pods it installed run as a kubelet would (their
// templates read back from the API server, the image through runc): the
// master selects a host, every node agent finds the cluster's networks in
// ovn-config (no network given anywhere) and writes its zone's rows — the
// endpoint's zone reroutes to the host's transit address, the host's zone
// to its management port.
func TestHelmInstallInterconnect(t *testing.T) {
	ctx := context.Background()
	topo := testenv.DefaultTopology(3, ipfamily.V4)
	topo.Interconnect = true
	zones := testenv.NewZones(t, topo)
	kube.CreateNodes(t, topo)
	// ovn-kubernetes' own configuration, as its manifests create it.
	if _, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ovn-kubernetes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.CoreV1().ConfigMaps("ovn-kubernetes").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ovn-config"},
		Data: map[string]string{"net_cidr": "10.244.0.0/16/24", "svc_cidr": "10.96.0.0/16", "mtu": "1400"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const ns = "egress-system"
	for _, args := range [][]string{ // the documented take-over of the CRDs the API server has
		{"label", "crd", "egressservices.k8s.ovn.org", "egressips.k8s.ovn.org", "app.kubernetes.io/managed-by=Helm", "--overwrite"},
		{"annotate", "crd", "egressservices.k8s.ovn.org", "egressips.k8s.ovn.org", "meta.helm.sh/release-name=ovn-egress-ic",
			"meta.helm.sh/release-namespace=" + ns, "--overwrite"},
	} {
		if out, err := kube.Kubectl(args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(t, "install", "ovn-egress-ic", chart, "--namespace", ns, "--create-namespace", "--set", "nb.zoneAddress=unix:/var/run/ovn/nb.sock")
	t.Cleanup(func() { run(t, "uninstall", "ovn-egress-ic", "--namespace", ns) })
	dep, err := kube.Client.AppsV1().Deployments(ns).Get(ctx, "ovn-egress-master", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := kube.Client.AppsV1().DaemonSets(ns).Get(ctx, "ovn-egress-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The pods a kubelet would run: their templates as installed.
	dir := t.TempDir()
	procs := testenv.NewProcesses(t)
	api := strings.TrimPrefix(kube.Config.Host, "https://")
	mpod := testenv.NewNetNS(t, "oe-helm-master")
	kube.ForwardInto(t, mpod)
	ident, err := kube.PodIdentity(ctx, dir, ns, "ovn-egress-master", "ovn-egress-master-0", "node1")
	if err != nil {
		t.Fatal(err)
	}
	master := img.StartPod(t, procs, dir, testenv.PodRun{Name: "helm-master", Pod: dep.Spec.Template.Spec, Container: "master",
		NetNS: "/run/netns/" + mpod.Name, ServiceAccount: ident, APIServer: api,
		Downward: map[string]string{"metadata.name": "ovn-egress-master-0", "metadata.namespace": ns}})
	agents := map[string]*testenv.Process{}
	for i, n := range topo.Nodes {
		host := testenv.NewNetNS(t, "oe-helm-"+n.Name)
		kube.ForwardInto(t, host)
		hostIP := n.HostIPs[0].Addr()
		host.Addr(t, "lo", netip.PrefixFrom(hostIP, hostIP.BitLen()).String()) // the node's IP, which the agent's listener binds
		// The master probes each node's management IP (ovn-k8s-mp0's, where
		// the agent's health listener binds): a link from the master's pod
		// to it, as the pod network gives a real master. Without it every
		// probe failed ("network is unreachable") and the master drained
		// each host shortly after choosing it.
		mgmt := n.MgmtIPs()[0].String()
		podSide := fmt.Sprintf("169.254.77.%d", i+1)
		testenv.Veth(t, mpod, "to-"+n.Name, host, "ovn-k8s-mp0")
		host.Addr(t, "ovn-k8s-mp0", mgmt+"/32")
		host.Sysctl(t, "net/ipv4/conf/ovn-k8s-mp0/forwarding", "1") // as ovnkube-node sets it
		mpod.Addr(t, "to-"+n.Name, podSide+"/32")
		host.MustRun(t, "ip", "route", "add", podSide+"/32", "dev", "ovn-k8s-mp0")
		mpod.MustRun(t, "ip", "route", "add", mgmt+"/32", "dev", "to-"+n.Name)
		name := "ovn-egress-node-" + n.Name
		ident, err := kube.PodIdentity(ctx, dir, ns, "ovn-egress-node", name, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		agents[n.Name] = img.StartPod(t, procs, dir, testenv.PodRun{Name: "helm-agent-" + n.Name, Pod: ds.Spec.Template.Spec, Container: "node",
			NetNS: "/run/netns/" + host.Name, ServiceAccount: ident, APIServer: api,
			Downward:  map[string]string{"metadata.name": name, "metadata.namespace": ns, "spec.nodeName": n.Name, "status.hostIP": hostIP.String()},
			HostPaths: map[string]string{"/etc/iproute2": "/etc/iproute2", "/var/run/openvswitch": zones[n.Name].Dir}})
	}

	// A workload: one endpoint on node1, an EgressService whose host the
	// master picks among node2 and node3.
	wl := kube.Namespace(t)
	t.Cleanup(func() {
		_ = kube.Egress.K8sV1().EgressServices(wl).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	kube.CreateLoadBalancer(t, wl, "web", []string{"172.18.0.100"}, "10.244.1.5@node1")
	es := testenv.EgressService(wl, "web", "")
	es.Spec.NodeSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"node1"}}}}
	if _, err := kube.Egress.K8sV1().EgressServices(wl).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The host may move while the agents start (a host whose agent does not
	// answer the health check yet is drained): wait for one host whose rows
	// both zones hold — the pod in its set, the reroute to it (the transit
	// IP from the pod's zone, the management IP in the host's own).
	var host string
	eventually(t, "status.host and the zones' rows", 60*time.Second, func() bool {
		cur, err := kube.Egress.K8sV1().EgressServices(wl).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || cur.Status.Host == "" {
			return false
		}
		host = cur.Status.Host
		hostNode := topo.Node(host)
		set := translate.AddressSetName("ovn-egress:EgressServiceHost:" + host + ":v4")
		for z, via := range map[string]string{"node1": hostNode.TransitIPs[0].Addr().String(), host: hostNode.MgmtIPs()[0].String()} {
			got, _ := zones[z].NBCtl("--if-exists", "get", "Address_Set", set, "addresses")
			policies, _ := zones[z].NBCtl("lr-policy-list", "ovn_cluster_router")
			if got != `["10.244.1.5"]` || !strings.Contains(policies, "reroute") || !strings.Contains(policies, via) {
				return false
			}
		}
		return true
	}, func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "host %q; master:\n%s\n", host, master.Log(30))
		for n, a := range agents {
			policies, _ := zones[n].NBCtl("lr-policy-list", "ovn_cluster_router")
			fmt.Fprintf(&b, "zone %s's policies:\n%s\nagent %s:\n%s\n", n, policies, n, a.Log(30))
		}
		return b.String()
	})
	if log := master.Output(); strings.Contains(log, "host unreachable") {
		t.Errorf("the master's health checks failed:\n%s", master.Log(30))
	}
	// Every agent, also one the workload does not involve (it may still be
	// starting on a loaded machine: seen under two busy loops), logs the
	// networks it took from ovn-config.
	for n, a := range agents {
		eventually(t, "agent "+n+" taking the networks from ovn-config", 60*time.Second, func() bool {
			log := a.Output()
			return strings.Contains(log, "cluster-subnets=\"10.244.0.0/16 (ConfigMap ovn-kubernetes/ovn-config)\"") &&
				strings.Contains(log, "service-cidrs=\"10.96.0.0/16 (ConfigMap ovn-kubernetes/ovn-config)\"")
		}, func() string { return a.Log(40) })
	}
}

// eventually polls cond until timeout, failing with what dump says.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool, dump func() string) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s\n%s", timeout, what, dump())
		}
	}
}
