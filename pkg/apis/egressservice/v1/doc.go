// +k8s:deepcopy-gen=package
// +groupName=k8s.ovn.org

// Package v1 holds the EgressService API, group k8s.ovn.org, version v1: the
// per-LoadBalancer-Service intent that its backing pods leave the cluster with
// the Service's load-balancer IP as source (through one host node), or through
// a chosen network.
package v1
