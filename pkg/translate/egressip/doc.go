// Package egressip assigns the IPs of EgressIP objects to egress nodes
// (AssignEgressIPs) and translates the assignments into NB rows
// (TranslateEgressIPs), shaped to grow with egress nodes and objects, not
// pods.
package egressip
