// Package nodeplan computes what a node agent programs on its node for the
// EgressServices it serves (NodePlan: nftables SNAT elements, ip rules) and
// what it reports back.
package nodeplan
