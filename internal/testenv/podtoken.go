package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodIdentity writes, in a new directory under dir, what the kubelet
// mounts at /var/run/secrets/kubernetes.io/serviceaccount for a pod named
// pod in namespace ns on node, running as ServiceAccount sa: a token bound
// to a Pod object the harness creates (so the API server puts the node in
// the token's claims, as admission policies read them), ca.crt and
// namespace. No kubelet runs that Pod; it exists for the token alone.
func (k *Kube) PodIdentity(ctx context.Context, dir, ns, sa, pod, node string) (string, error) {
	if _, err := k.ServiceAccountConfig(ctx, ns, sa); err != nil { // namespace and ServiceAccount
		return "", err
	}
	pods := k.Client.CoreV1().Pods(ns)
	_ = pods.Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	var p *corev1.Pod
	err := waitFor(30*time.Second, "the pod object "+pod, paced(100*time.Millisecond, func() error {
		var err error
		p, err = pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
				Containers: []corev1.Container{{Name: "c", Image: "ovn-egress"}}}}, metav1.CreateOptions{})
		return err // AlreadyExists: the deleted one is still going
	}))
	if err != nil {
		return "", err
	}
	expiry := int64((24 * time.Hour).Seconds())
	tr, err := k.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &expiry, BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s for pod %s: %w", ns, sa, pod, err)
	}
	out, err := os.MkdirTemp(dir, "sa-"+pod+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(out, 0o755); err != nil {
		return "", err
	}
	ca := k.Config.CAData
	if len(ca) == 0 && k.Config.CAFile != "" {
		if ca, err = os.ReadFile(k.Config.CAFile); err != nil {
			return "", err
		}
	}
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(ns)} {
		// 0644: the kubelet's default mode for the projected volume, so a
		// container running as any user reads it.
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return out, nil
}
