package kind

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"net/netip"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// pod is the single pod of a backend Deployment pinned to one node.
type pod struct {
	deploy string
	name   string
	node   string
	ips    map[corev1.IPFamily]netip.Addr
}

func (p *pod) String() string { return p.deploy + "@" + p.node }

var l2AdvertisementGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}

// backend runs `echo serve` as a one-replica Deployment on node, its pod
// labelled with labels (the Services select on them), and waits for it.
func (e *env) backend(name, node string, labels map[string]string) *pod {
	e.t.Helper()
	return e.deployment(name, node, labels, false)
}

// hostEcho runs `echo serve` host-networked on node at hostEchoPort: the
// destination of the pod → node checks.
func (e *env) hostEcho(name, node string) {
	e.t.Helper()
	e.deployment(name, node, nil, true)
}

func (e *env) deployment(name, node string, labels map[string]string, hostNet bool) *pod {
	e.t.Helper()
	podLabels := map[string]string{"e2e-deployment": name}
	for k, v := range labels {
		podLabels[k] = v
	}
	port := echoPort
	if hostNet {
		port = hostEchoPort
	}
	one, grace := int32(1), int64(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"e2e-deployment": name}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{corev1.LabelHostname: node},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					HostNetwork:                   hostNet,
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:            "echo",
						Image:           *flagEchoImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Args:            []string{"serve", "-port", strconv.Itoa(port)},
						Ports: []corev1.ContainerPort{
							{Name: "tcp", ContainerPort: int32(port), Protocol: corev1.ProtocolTCP},
							{Name: "udp", ContainerPort: int32(port), Protocol: corev1.ProtocolUDP},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	if _, err := e.kube.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create deployment %s: %v", name, err)
	}
	p := &pod{deploy: name, node: node, ips: map[corev1.IPFamily]netip.Addr{}}
	e.eventually("pod of "+name+" ready on "+node, 3*time.Minute, func() (bool, string) {
		list, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "e2e-deployment=" + name})
		if err != nil {
			return false, err.Error()
		}
		for _, it := range list.Items {
			if it.DeletionTimestamp != nil || !podReady(&it) {
				continue
			}
			p.name = it.Name
			for _, ip := range it.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil {
					p.ips[familyOf(a)] = a
				}
			}
			return true, ""
		}
		return false, fmt.Sprintf("%d pods, none ready", len(list.Items))
	})
	return p
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deleteDeployment removes a backend and waits until its pod is gone.
func (e *env) deleteDeployment(name string) {
	e.t.Helper()
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	if err := e.kube.AppsV1().Deployments(e.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete deployment %s: %v", name, err)
	}
	e.eventually("pods of "+name+" gone", 2*time.Minute, func() (bool, string) {
		list, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "e2e-deployment=" + name})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d pods left", len(list.Items))
	})
}

// loadBalancer creates a single-stack LoadBalancer Service of family f
// selecting selector, waits for MetalLB to give it an ingress IP, and
// returns that IP. MetalLB announces it only once advertise is called.
func (e *env) loadBalancer(name string, f corev1.IPFamily, selector map[string]string, etpLocal bool) netip.Addr {
	e.t.Helper()
	single := corev1.IPFamilyPolicySingleStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeLoadBalancer,
			Selector:       selector,
			IPFamilies:     []corev1.IPFamily{f},
			IPFamilyPolicy: &single,
			Ports:          []corev1.ServicePort{{Name: "tcp", Port: echoPort, Protocol: corev1.ProtocolTCP}},
		},
	}
	if etpLocal {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	if _, err := e.kube.CoreV1().Services(e.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create service %s: %v", name, err)
	}
	var ip netip.Addr
	e.eventually("ingress IP of "+name+" from MetalLB", 2*time.Minute, func() (bool, string) {
		s, err := e.kube.CoreV1().Services(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && familyOf(a) == f {
				ip = a
				return true, ""
			}
		}
		return false, fmt.Sprintf("ingress %v", s.Status.LoadBalancer.Ingress)
	})
	e.t.Logf("service %s/%s: ingress %s", e.ns, name, ip)
	return ip
}

// advertise makes MetalLB announce the Service's ingress IP (L2) from the
// node carrying its egress-service label only — the node status.host
// names — as an operator of EgressServices configures MetalLB.
func (e *env) advertise(svc string) {
	e.t.Helper()
	name := e.ns + "-" + svc
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1",
		"kind":       "L2Advertisement",
		"metadata":   map[string]any{"name": name, "namespace": *flagMetalLBNamespace},
		"spec": map[string]any{
			"ipAddressPools": []any{*flagMetalLBPool},
			"nodeSelectors": []any{map[string]any{
				"matchLabels": map[string]any{hosts.NodeLabel(e.ns, svc): ""},
			}},
		},
	}}
	res := e.dyn.Resource(l2AdvertisementGVR).Namespace(*flagMetalLBNamespace)
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create L2Advertisement %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := ctxTimeout(30 * time.Second)
		defer cancel()
		if err := res.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Logf("delete L2Advertisement %s: %v", name, err)
		}
	})
}

// egressService creates the EgressService of Service name.
func (e *env) egressService(name string, spec egressv1.EgressServiceSpec) {
	e.t.Helper()
	es := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Spec: spec}
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	if _, err := e.egress.K8sV1().EgressServices(e.ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create EgressService %s: %v", name, err)
	}
}

// updateEgressService changes the spec of an EgressService.
func (e *env) updateEgressService(name string, mutate func(*egressv1.EgressServiceSpec)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := ctxTimeout(30 * time.Second)
		defer cancel()
		es, err := e.egress.K8sV1().EgressServices(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(&es.Spec)
		_, err = e.egress.K8sV1().EgressServices(e.ns).Update(ctx, es, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("update EgressService %s: %v", name, err)
	}
}

func (e *env) deleteEgressService(name string) {
	e.t.Helper()
	ctx, cancel := ctxTimeout(30 * time.Second)
	defer cancel()
	if err := e.egress.K8sV1().EgressServices(e.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete EgressService %s: %v", name, err)
	}
}

func selectorOf(value string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{selectorKey: value}}
}

func anyNode(h string) bool { return h != "" && h != egressv1.HostAll }

func isHost(node string) func(string) bool { return func(h string) bool { return h == node } }

// waitHost waits until status.host of name satisfies ok and the
// egress-service label sits on exactly that node (on none for "" and ALL),
// and returns the host.
func (e *env) waitHost(name string, timeout time.Duration, ok func(string) bool) string {
	e.t.Helper()
	label := hosts.NodeLabel(e.ns, name)
	var host string
	e.eventually("status.host of "+name+" and its node label", timeout, func() (bool, string) {
		es, err := e.egress.K8sV1().EgressServices(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		host = es.Status.Host
		if !ok(host) {
			return false, fmt.Sprintf("status.host %q", host)
		}
		nodes, err := e.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: label})
		if err != nil {
			return false, err.Error()
		}
		var labelled []string
		for _, n := range nodes.Items {
			labelled = append(labelled, n.Name)
		}
		want := []string{}
		if anyNode(host) {
			want = []string{host}
		}
		return strings.Join(labelled, ",") == strings.Join(want, ","),
			fmt.Sprintf("status.host %q, label %s on %v", host, label, labelled)
	})
	return host
}

// label sets (value != "") or removes a label on node; the test's cleanup
// removes it again.
func (e *env) label(node, key, value string) {
	e.t.Helper()
	e.setLabel(node, key, value)
	if value != "" {
		e.t.Cleanup(func() { e.setLabel(node, key, "") })
	}
}

func (e *env) setLabel(node, key, value string) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := ctxTimeout(30 * time.Second)
		defer cancel()
		n, err := e.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if value == "" {
			delete(n.Labels, key)
		} else {
			n.Labels[key] = value
		}
		_, err = e.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Errorf("label node %s %s=%q: %v", node, key, value, err)
	}
}
