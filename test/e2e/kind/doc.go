// Package kind is the ovn-egress end-to-end suite for a real cluster: kind
// running ovn-kubernetes in its default interconnect deployment (every node
// its own zone with its own NB; its egress-service feature disabled),
// MetalLB in L2 mode, the ovn-egress master (host selection) and node
// agents (host side and their zone's translation) deployed from dist/ic,
// and an external container on the kind network that answers every
// connection with the source address it saw. Every scenario is judged by
// that address. E2E_MODE=central runs the same scenarios against one zone
// holding every node, the master writing its NB (dist/master, dist/node).
//
// The scenarios live in the _test.go files; hack/ creates the cluster and
// runs them. Without a cluster (KUBECONFIG unset or unreachable) `go test`
// fails at once and says so; it never passes by skipping. See README.md.
package kind
