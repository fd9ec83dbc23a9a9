package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TenantRole is the ClusterRole the chart ships for namespace tenants
// (dist/tenant-role.yaml).
const TenantRole = "ovn-egress-egressservice-editor"

// TenantConfig returns a config that authenticates as a namespace
// tenant of namespace, as docs/security.md describes one: the
// ServiceAccount namespace/name bound in its namespace to Kubernetes'
// `edit` role and to the shipped TenantRole (applied from
// dist/tenant-role.yaml), nothing else.
func (k *Kube) TenantConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	if err := k.Apply(ctx, filepath.Join(root, "dist", "tenant-role.yaml")); err != nil {
		return nil, err
	}
	cfg, err := k.ServiceAccountConfig(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	for _, role := range []string{"edit", TenantRole} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}}}
		if _, err := k.Client.RbacV1().RoleBindings(namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("bind %s to %s/%s: %w", role, namespace, name, err)
		}
	}
	return cfg, nil
}
