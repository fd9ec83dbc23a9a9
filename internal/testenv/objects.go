package testenv

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// NodeObject returns the Kubernetes Node of a topology node: Ready, labelled
// with kubernetes.io/hostname, carrying the ovn-kubernetes annotations
// (shared gateway mode) and its external addresses as InternalIPs.
func (t Topology) NodeObject(n TopologyNode) *corev1.Node {
	ann := t.NodeAnnotations(n)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{"kubernetes.io/hostname": n.Name}, Annotations: ann},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	for _, p := range n.ExternalIPs {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: p.Addr().String()})
	}
	return node
}

// LoadBalancerService returns a LoadBalancer Service with the given ingress IPs in its status.
func LoadBalancerService(ns, name string, ingress ...string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

// EndpointSlices returns the Service's EndpointSlices (one per family) for
// endpoints written "ip@node".
func EndpointSlices(ns, svc string, eps ...string) []*discoveryv1.EndpointSlice {
	by := map[discoveryv1.AddressType]*discoveryv1.EndpointSlice{}
	var out []*discoveryv1.EndpointSlice
	for _, e := range eps {
		ip, node, _ := strings.Cut(e, "@")
		at := discoveryv1.AddressTypeIPv4
		if strings.Contains(ip, ":") {
			at = discoveryv1.AddressTypeIPv6
		}
		s := by[at]
		if s == nil {
			s = &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%s", svc, strings.ToLower(string(at))),
					Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
				AddressType: at,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
			}
			by[at] = s
			out = append(out, s)
		}
		ep := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}
		if node != "" {
			ep.NodeName = ptr(node)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return out
}

// EgressService returns an EgressService with status.host set ("" for none;
// "ALL" makes it sourceIPBy Network).
func EgressService(ns, name, host string) *egressv1.EgressService {
	e := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: egressv1.EgressServiceStatus{Host: host}}
	if host == egressv1.HostAll {
		e.Spec.SourceIPBy = egressv1.Network
	}
	return e
}

func ptr[T any](v T) *T { return &v }
