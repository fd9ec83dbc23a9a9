// Package translate is the shared model of ovn-egress's pure core: the
// translation's configuration, the cluster's objects as translation reads
// them (Input; node, Service and endpoint facts parsed from the
// ovn-kubernetes annotations and the API objects), the keys, rows and owner
// ids of what ovn-egress writes into the OVN northbound database, problems
// as typed reasons for Events, the node agents' readiness-report protocol,
// and the renderers (ovn-nbctl commands, YAML, JSON).
//
// The engines are its subpackages, each input structs in and results out:
// egressservice (the EgressService rows, whole or kept current by an
// Index), hosts (host selection), nodeplan (a node agent's plan) and
// egressip (EgressIP assignment and rows). Nothing here or there talks to a
// client, reads a clock, logs or keeps globals: they are tested with tables
// and golden files, and the controllers, the CLI and the benchmarks share
// them.
package translate
