package translate

import (
	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressip/v1"
)

// EgressIPRowsFrom builds the input of TranslateEgressIPs from listed
// objects (the master's listers, verify's lists): every EgressIP with
// assigned IPs and the pods it selects, and the nodes' gateway routers.
// The selection's problems (an invalid selector) are returned beside it.
// Served is left to the caller (it is read from NB).
func EgressIPRowsFrom(cfg Config, eips []*egressipv1.EgressIP, namespaces []*corev1.Namespace, pods []*corev1.Pod, nodes []*corev1.Node) (EgressIPRowsInput, Problems) {
	in := EgressIPRowsInput{Config: cfg, Nodes: make(map[string]*NodeInfo, len(nodes))}
	for _, n := range nodes {
		in.Nodes[n.Name] = ParseNode(n, cfg.JoinSubnets)
	}
	var problems Problems
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

// Merge adds o's rows and problems to d; a key in both is o's (the callers
// merge translations of disjoint keys: EgressServices and EgressIPs).
func (d *Desired) Merge(o *Desired) {
	if d.Rows == nil {
		d.Rows = map[Key]*Rows{}
	}
	for k, r := range o.Rows {
		d.Rows[k] = r
	}
	d.Problems = append(d.Problems, o.Problems...)
}
