package egressip

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// EgressIPRowsFrom builds the input of TranslateEgressIPs from listed
// objects (the master's listers, verify's lists): every EgressIP with
// assigned IPs and the pods it selects, and the nodes' gateway routers.
// The selection's problems (an invalid selector) are returned beside it.
// Served is left to the caller (it is read from NB).
func EgressIPRowsFrom(cfg translate.Config, eips []*egressipv1.EgressIP, namespaces []*corev1.Namespace, pods []*corev1.Pod, nodes []*corev1.Node) (EgressIPRowsInput, translate.Problems) {
	in := EgressIPRowsInput{Config: cfg, Nodes: make(map[string]*translate.NodeInfo, len(nodes))}
	for _, n := range nodes {
		in.Nodes[n.Name] = translate.ParseNode(n, cfg.JoinSubnets)
	}
	var problems translate.Problems
	for _, e := range eips {
		if len(e.Status.Items) == 0 {
			continue // nothing assigned: no rows, the assignment's Events say why
		}
		sel, p := SelectEgressIPPods(e, namespaces, pods, cfg.ClusterSubnets)
		problems = append(problems, p...)
		in.Objects = append(in.Objects, EgressIPObject{EgressIP: e, Pods: sel})
	}
	return in, problems
}

// InZone makes in the input of one interconnect zone's rows: the
// addresses of pods (all the cluster's, or at least every selected one)
// running on the zone's nodes become LocalPods; a pod's node is looked up in
// in.Nodes.
func (in *EgressIPRowsInput) InZone(zone string, pods []*corev1.Pod) {
	in.Zone = zone
	in.LocalPods = ZonePodAddresses(pods, func(node string) string {
		if n := in.Nodes[node]; n != nil {
			return n.ZoneName()
		}
		return ""
	}, zone)
}

// ZonePodAddresses returns the addresses of the pods whose node's zone
// (zoneOf) is zone.
func ZonePodAddresses(pods []*corev1.Pod, zoneOf func(node string) string, zone string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	zones := map[string]bool{}
	for _, p := range pods {
		in, seen := zones[p.Spec.NodeName]
		if !seen {
			in = p.Spec.NodeName != "" && zoneOf(p.Spec.NodeName) == zone
			zones[p.Spec.NodeName] = in
		}
		if !in {
			continue
		}
		for _, pip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(pip.IP); err == nil {
				out[ipfamily.Canonical(a)] = true
			}
		}
	}
	return out
}

// EgressIPNodes are the nodes holding an IP of some EgressIP (its
// status.items): Input.EgressNodes.
func EgressIPNodes(eips []*egressipv1.EgressIP) map[string]bool {
	out := map[string]bool{}
	for _, e := range eips {
		for _, it := range e.Status.Items {
			out[it.Node] = true
		}
	}
	return out
}

// NodeZone is a Node's interconnect zone: k8s.ovn.org/zone-name, or the
// node's own name (NodeInfo.ZoneName without parsing the rest).
func NodeZone(n *corev1.Node) string {
	if z := n.Annotations[translate.AnnotZoneName]; z != "" {
		return z
	}
	return n.Name
}
