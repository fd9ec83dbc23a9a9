package kind

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// The product as hack/deploy.sh installs it from dist/.
const (
	masterDeployment = "ovn-egress-master"
	masterContainer  = "master"
	masterSelector   = "app.kubernetes.io/name=ovn-egress,app.kubernetes.io/component=master"
	agentDaemonSet   = "ovn-egress-node"
	agentContainer   = "node"
	agentSelector    = "app.kubernetes.io/name=ovn-egress,app.kubernetes.io/component=node"
	leaseName        = "ovn-egress-master"
	backendFlag      = "--snat-backend="
	zoneFlag         = "--zone"
)

// nbPods are the running ovn-kubernetes pods whose nb-ovsdb container
// holds an NB the product writes (-nb-pod-selector): one per node in
// interconnect (each node its own zone and NB, hack/deploy.sh E2E_MODE=ic),
// a single one with one central NB (E2E_MODE=central).
func (e *env) nbPods() ([]corev1.Pod, error) {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	list, err := e.kube.CoreV1().Pods(ovnkNamespace).List(ctx, metav1.ListOptions{LabelSelector: *flagNBSelector})
	if err != nil {
		return nil, fmt.Errorf("list NB pods: %w", err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no running pod matches -nb-pod-selector %q in namespace %s", *flagNBSelector, ovnkNamespace)
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Spec.NodeName, b.Spec.NodeName) })
	return out, nil
}

// nbctl runs ovn-nbctl against the NB that holds node's rows (its
// ovn_cluster_router policies, GR_<node>): the only NB pod when there is
// one, else the NB pod on node.
func (e *env) nbctl(node string, args ...string) (string, error) {
	pods, err := e.nbPods()
	if err != nil {
		return "", err
	}
	pod := pods[0]
	if len(pods) > 1 {
		i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Spec.NodeName == node })
		if i < 0 {
			return "", fmt.Errorf("%d pods match -nb-pod-selector %q, none on node %s (interconnect: every node holds its own NB)",
				len(pods), *flagNBSelector, node)
		}
		pod = pods[i]
	}
	return e.nbctlIn(pod.Name, args...)
}

// nbctlIn runs ovn-nbctl in the nb-ovsdb container of the ovn-kubernetes
// pod podName (its local NB socket).
func (e *env) nbctlIn(podName string, args ...string) (string, error) {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	return e.execIn(ctx, ovnkNamespace, podName, "nb-ovsdb", append([]string{"ovn-nbctl"}, args...)...)
}

// dump logs what a reader of a failed scenario needs: the EgressServices,
// the egress labels and readiness reports on the nodes, the NB rows, and
// the tail of the master's and the agents' logs.
func (e *env) dump() {
	ctx, cancel := ctxTimeout(time.Minute)
	defer cancel()
	if list, err := e.egress.K8sV1().EgressServices(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, es := range list.Items {
			e.t.Logf("EgressService %s: spec %+v status.host %q", es.Name, es.Spec, es.Status.Host)
		}
	}
	if nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			var labels []string
			for k, v := range n.Labels {
				if strings.HasPrefix(k, hosts.NodeLabelPrefix) || strings.HasPrefix(k, "ovn-egress.io/") {
					labels = append(labels, k+"="+v)
				}
			}
			slices.Sort(labels)
			e.t.Logf("node %s ready=%v labels %v programmed %s", n.Name, nodeReady(&n), labels, n.Annotations[translate.ReportAnnotation])
		}
	}
	if pods, err := e.nbPods(); err != nil {
		e.t.Logf("NB: %v", err)
	} else {
		for _, p := range pods {
			for _, args := range [][]string{{"lr-policy-list", "ovn_cluster_router"}, {"find", "NAT", "external_ids:k8s.ovn.org/owner-controller=ovn-egress"}} {
				out, err := e.nbctlIn(p.Name, args...)
				e.t.Logf("ovn-nbctl %s in the NB of %s on %s (%v):\n%s", strings.Join(args, " "), p.Name, p.Spec.NodeName, err, out)
			}
		}
	}
	for _, sel := range []string{masterSelector, agentSelector} {
		pods, err := e.kube.CoreV1().Pods(productNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			tail := int64(40)
			raw, err := e.kube.CoreV1().Pods(productNamespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
			e.t.Logf("logs of %s on %s (%v):\n%s", p.Name, p.Spec.NodeName, err, raw)
		}
	}
}

// leader is the master pod holding the Lease.
func (e *env) leader() string {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	l, err := e.kube.CoordinationV1().Leases(productNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// masterPods lists the running master pods that are not being deleted.
func (e *env) masterPods() []string {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	pods, err := e.kube.CoreV1().Pods(productNamespace).List(ctx, metav1.ListOptions{LabelSelector: masterSelector})
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p.Name)
		}
	}
	return out
}

// waitMasterLeads waits until the master Deployment is rolled out and one
// of its current pods holds the Lease.
func (e *env) waitMasterLeads() {
	e.t.Helper()
	e.eventually("master rolled out and leading", 3*time.Minute, func() (bool, string) {
		d, err := e.kube.AppsV1().Deployments(productNamespace).Get(context.Background(), masterDeployment, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if !rolledOut(d) {
			return false, fmt.Sprintf("rollout: %+v", d.Status)
		}
		pods, leader := e.masterPods(), e.leader()
		return slices.Contains(pods, leader), fmt.Sprintf("lease holder %q, pods %v", leader, pods)
	})
}

func rolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}

// agentTranslates says whether the node agents translate their own zones
// (interconnect, dist/ic: their DaemonSet runs them with --zone) rather
// than the master one central NB.
func (e *env) agentTranslates() bool {
	e.t.Helper()
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	ds, err := e.kube.AppsV1().DaemonSets(productNamespace).Get(ctx, agentDaemonSet, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get DaemonSet %s: %v", agentDaemonSet, err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == agentContainer && slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, zoneFlag) }) {
			return true
		}
	}
	return false
}

// withBackend returns args with --snat-backend=backend in place of any
// --snat-backend flag.
func withBackend(args []string, backend string) []string {
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, backendFlag) })
	return append(args, backendFlag+backend)
}

// setBackend switches the translation to --snat-backend=backend and waits
// until it runs with it: in interconnect the node agents' DaemonSet (each
// agent translates its own zone; the master only selects hosts and has no
// use for the flag), else the master's Deployment (a new replica leads).
func (e *env) setBackend(backend string) {
	e.t.Helper()
	if e.agentTranslates() {
		e.setAgentBackend(backend)
		return
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := ctxTimeout(30 * time.Second)
		defer cancel()
		d, err := e.kube.AppsV1().Deployments(productNamespace).Get(ctx, masterDeployment, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range d.Spec.Template.Spec.Containers {
			if c := &d.Spec.Template.Spec.Containers[i]; c.Name == masterContainer {
				c.Args = withBackend(c.Args, backend)
			}
		}
		_, err = e.kube.AppsV1().Deployments(productNamespace).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("set master %s%s: %v", backendFlag, backend, err)
	}
	e.waitMasterLeads()
	e.t.Logf("master runs with %s%s", backendFlag, backend)
}

// setAgentBackend rolls the node agents' DaemonSet to
// --snat-backend=backend and waits until every agent runs with it.
func (e *env) setAgentBackend(backend string) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := ctxTimeout(30 * time.Second)
		defer cancel()
		ds, err := e.kube.AppsV1().DaemonSets(productNamespace).Get(ctx, agentDaemonSet, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range ds.Spec.Template.Spec.Containers {
			if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == agentContainer {
				c.Args = withBackend(c.Args, backend)
			}
		}
		_, err = e.kube.AppsV1().DaemonSets(productNamespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("set node agents %s%s: %v", backendFlag, backend, err)
	}
	e.eventually("node agents rolled out", 5*time.Minute, func() (bool, string) {
		ds, err := e.kube.AppsV1().DaemonSets(productNamespace).Get(context.Background(), agentDaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := ds.Status
		return s.ObservedGeneration >= ds.Generation && s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
			s.NumberAvailable == s.DesiredNumberScheduled && s.NumberUnavailable == 0, fmt.Sprintf("rollout: %+v", s)
	})
	e.t.Logf("node agents (zone translation) run with %s%s", backendFlag, backend)
}

// agentPod is the node agent pod on node ("" when there is none).
func (e *env) agentPod(node string) (name string, ready bool) {
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	pods, err := e.kube.CoreV1().Pods(productNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: agentSelector, FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return "", false
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return p.Name, podReady(&p)
		}
	}
	return "", false
}

// stopAgent keeps the node agent off node (label agentOffKey; the
// DaemonSet's node affinity deletes its pod) until the test ends, when the
// agent comes back and the cleanup waits for it.
func (e *env) stopAgent(node string) {
	e.t.Helper()
	e.setLabel(node, agentOffKey, "true")
	e.t.Cleanup(func() {
		e.setLabel(node, agentOffKey, "")
		e.waitAgent(node)
	})
	e.eventually("no agent on "+node, 2*time.Minute, func() (bool, string) {
		name, _ := e.agentPod(node)
		return name == "", "agent pod " + name
	})
}

// waitAgent waits until the node agent on node is ready.
func (e *env) waitAgent(node string) {
	e.t.Helper()
	e.eventually("agent ready on "+node, 3*time.Minute, func() (bool, string) {
		name, ready := e.agentPod(node)
		return ready, fmt.Sprintf("agent pod %q ready=%v", name, ready)
	})
}

// deletePod deletes a pod of the product (a crash, as far as the rest of
// the cluster can tell).
func (e *env) deletePod(name string) {
	e.t.Helper()
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	zero := int64(0)
	if err := e.kube.CoreV1().Pods(productNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		e.t.Fatalf("delete pod %s: %v", name, err)
	}
}
