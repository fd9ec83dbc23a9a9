// Package egressservice translates EgressServices into the NB rows of a
// cluster or of one interconnect zone: per host and family one address set
// of the endpoints it serves, its reroute and allow policies, on the
// gateway path the NAT rows, and the node-IP sets, the drop rows of
// unassigned traffic and a zone's cluster routes.
//
// Translate computes them from scratch. Index holds the same translation
// and keeps it current one change at a time, translating again only the
// EgressServices whose inputs changed: the translation controller's model,
// with Translate as its oracle.
package egressservice
