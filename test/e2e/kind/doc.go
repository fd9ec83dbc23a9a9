// Package kind is the ovn-egress end-to-end suite for a real cluster: kind
// running ovn-kubernetes (interconnect, one zone holding every node, its own
// egress-service feature disabled), MetalLB in L2 mode, the ovn-egress
// master and node agent deployed from dist/, and an external container on
// the kind network that answers every connection with the source address it
// saw. Every scenario is judged by that address.
//
// The scenarios live in the _test.go files; hack/ creates the cluster and
// runs them. Without a cluster (KUBECONFIG unset or unreachable) `go test`
// fails at once and says so; it never passes by skipping. See README.md.
package kind
