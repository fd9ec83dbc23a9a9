// +k8s:deepcopy-gen=package
// +groupName=k8s.ovn.org

// Package v1 holds the EgressIP API, group k8s.ovn.org, version v1: the
// cluster-scoped intent that every pod of the selected namespaces (and,
// optionally, matching a pod selector) leaves the cluster with one of a
// fixed set of IPs as source, through the node that holds it. The schema is
// a compatible superset of ovn-kubernetes' (an object valid there is valid
// here; the same status.items[]{node, egressIP}).
package v1
