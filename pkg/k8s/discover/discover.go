// Package discover finds the cluster's networks where the operator gave
// none: the pod (cluster) subnets and the service CIDRs from
// ovn-kubernetes' own configuration (its ovn-config ConfigMap: net_cidr,
// svc_cidr), the service CIDRs also from the ServiceCIDR objects
// (networking.k8s.io/v1), the join subnets from ovn-kubernetes' defaults
// for the families the cluster uses. A network given by flag is kept, and
// one that disagrees with what the cluster says is reported.
package discover

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// OVNConfigNamespaces are where ovn-kubernetes keeps its ovn-config
// ConfigMap (upstream's manifests and Helm chart; OpenShift).
var OVNConfigNamespaces = []string{"ovn-kubernetes", "openshift-ovn-kubernetes"}

// OVNConfigName is ovn-kubernetes' configuration ConfigMap.
const OVNConfigName = "ovn-config"

// DefaultJoinSubnets are ovn-kubernetes' join subnets unless configured.
var DefaultJoinSubnets = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16"), netip.MustParsePrefix("fd98::/64")}

// Network kinds.
const (
	Cluster = "cluster"
	Service = "service"
	Join    = "join"
)

// Found is what the cluster says of its networks, and where each came
// from ("ovn-config ovn-kubernetes/ovn-config", "ServiceCIDR kubernetes",
// "ovn-kubernetes' default").
type Found struct {
	Networks map[string][]netip.Prefix
	Sources  map[string]string
	// Objects are the objects each kind was read from (for Events).
	Objects map[string]runtime.Object
}

// Discover reads what the cluster says. A source that is not there (no
// ovn-config, an API server without ServiceCIDRs) is skipped.
func Discover(ctx context.Context, kube kubernetes.Interface) (Found, error) {
	f := Found{Networks: map[string][]netip.Prefix{}, Sources: map[string]string{}, Objects: map[string]runtime.Object{}}
	for _, ns := range OVNConfigNamespaces {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, OVNConfigName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			continue
		}
		if err != nil {
			return f, fmt.Errorf("read %s/%s: %w", ns, OVNConfigName, err)
		}
		f.fromOVNConfig(cm)
		break
	}
	if len(f.Networks[Service]) == 0 {
		list, err := kube.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
		switch {
		case err == nil:
			for i := range list.Items {
				sc := &list.Items[i]
				for _, c := range sc.Spec.CIDRs {
					if p, err := netip.ParsePrefix(c); err == nil {
						f.add(Service, p.Masked(), "ServiceCIDR "+sc.Name, sc)
					}
				}
			}
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		default:
			return f, fmt.Errorf("list ServiceCIDRs: %w", err)
		}
	}
	if cl := f.Networks[Cluster]; len(cl) > 0 {
		for _, p := range DefaultJoinSubnets {
			if slices.ContainsFunc(cl, func(c netip.Prefix) bool { return ipfamily.OfPrefix(c) == ipfamily.OfPrefix(p) }) {
				f.add(Join, p, "ovn-kubernetes' default", nil)
			}
		}
	}
	return f, nil
}

func (f *Found) add(kind string, p netip.Prefix, source string, obj runtime.Object) {
	if slices.Contains(f.Networks[kind], p) {
		return
	}
	f.Networks[kind] = append(f.Networks[kind], p)
	if f.Sources[kind] == "" {
		f.Sources[kind] = source
		if obj != nil {
			f.Objects[kind] = obj
		}
	}
}

// fromOVNConfig reads net_cidr ("10.244.0.0/16/24,fd00:10:244::/48/64":
// host prefixes dropped) and svc_cidr.
func (f *Found) fromOVNConfig(cm *corev1.ConfigMap) {
	src := "ConfigMap " + cm.Namespace + "/" + cm.Name
	for _, kv := range []struct{ key, kind string }{{"net_cidr", Cluster}, {"svc_cidr", Service}} {
		for _, s := range strings.Split(cm.Data[kv.key], ",") {
			if p, err := ParsePrefix(s); err == nil {
				f.add(kv.kind, p, src, cm)
			}
		}
	}
}

// ParsePrefix reads a CIDR, also as ovn-kubernetes writes cluster subnets
// (CIDR/hostPrefix), masked.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "/"); i > 0 && strings.Count(s, "/") == 2 {
		s = s[:i]
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// Disagreement says how a network given by flag differs from the
// cluster's, or "" when they agree (or the cluster says nothing).
func Disagreement(kind string, given []netip.Prefix, f Found) string {
	found := f.Networks[kind]
	if len(found) == 0 || len(given) == 0 {
		return ""
	}
	var missing []string
	for _, p := range found {
		if !slices.ContainsFunc(given, func(g netip.Prefix) bool { return g.Overlaps(p) && g.Bits() <= p.Bits() }) {
			missing = append(missing, p.String())
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("the %s networks given (%s) do not cover %s, which %s says the cluster uses", kind, join(given), strings.Join(missing, ","), f.Sources[kind])
}

func join(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
