package testenv

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunPod creates the Pod object ns/name on node with labels, Running with
// the addresses ips (no kubelet here: the status is written directly), and
// deletes it at once when t ends. edit, if given, changes the object before
// it is created (host networking, say).
func (k *Kube) RunPod(t testing.TB, ns, name, node string, labels map[string]string, ips []netip.Addr, edit ...func(*corev1.Pod)) {
	t.Helper()
	ctx := context.Background()
	api := k.Client.CoreV1().Pods(ns)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	for _, f := range edit {
		f(p)
	}
	cur, err := api.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = api.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	cur.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	for i, ip := range ips {
		if i == 0 {
			cur.Status.PodIP = ip.String()
		}
		cur.Status.PodIPs = append(cur.Status.PodIPs, corev1.PodIP{IP: ip.String()})
	}
	if _, err := api.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
