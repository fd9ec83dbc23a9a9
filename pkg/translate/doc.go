// Package translate is ovn-egress's pure core: EgressServices, Services,
// EndpointSlices and Nodes (with the ovn-kubernetes annotations they carry)
// go in; the desired OVN northbound rows, host choices and node plans come
// out, each row with a deterministic id and ovn-egress's owner external_ids,
// plus per-EgressService problems as typed reasons for Events.
//
// Nothing here talks to a client, reads a clock, logs or keeps globals:
// every function is a function of its arguments, so it is tested with tables
// and golden files, and the controllers, the CLI and the benchmarks share it.
package translate
