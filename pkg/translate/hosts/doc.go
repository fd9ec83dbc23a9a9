// Package hosts chooses each EgressService's host (SelectHosts: sticky,
// least loaded, compatible with ovn-kubernetes) and keeps the host labels
// the announcers follow.
package hosts
