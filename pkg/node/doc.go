// Package node is the ovn-egress node agent (`ovn-egress node`): for the
// EgressServices whose status.host is its node (or ALL) it programs the
// host side of the egress path and reports on its Node what it programmed.
//
// Flow: informers (EgressServices, Services, EndpointSlices, its own Node)
// → one coalescing queue key → sync: gather the listers' objects and
// resolve network names (TableResolver: VRF device, else rt_tables) →
// translate.NodePlan (pure) → Applier → readiness report
// (translate.ReportAnnotation, a JSON merge patch of that one annotation).
//
// What the agent owns on a node, and nothing else:
//   - every ip rule at its priority (5000), in both families; rules at other
//     priorities are never read for writing, never changed;
//   - the nftables table `inet ovn-egress` (layout in nft.go): SNAT maps
//     keyed by endpoint IP, a srcnat chain that maps them and keeps cluster
//     traffic unSNATed, and a leak guard that drops an endpoint's packet
//     that would leave un-SNATed; ovn-kubernetes' tables are never touched;
//   - the readiness annotation on its Node;
//   - IPv4/IPv6 forwarding, switched on (never off) when the plan uses a
//     family and --enable-forwarding is set, without undoing a node's
//     hardening: IPv4 per interface, IPv6 behind a forward guard chain
//     (forwarding.go).
//
// Ordering (DESIGN §3): new state is added before the report names it; a
// service is withdrawn from the report, and the agent waits
// Config.WithdrawGrace, before its state is deleted. Each apply lists the
// owned state from the kernel, diffs, adds before it deletes, and returns
// what it reached; only services whose every rule and element was reached
// are reported. EEXIST on add and ENOENT/ESRCH on delete count as success,
// decided by errno.
//
// Netlink goes through the consumer-side Netlink interface (FakeNetlink in
// unit tests), nftables through knftables.Interface (knftables.NewFake in
// unit tests). With Config.NetNS all of it runs inside a named network
// namespace (Namespace.Do), which is how the tests and the local end-to-end
// suite run one agent per "node" on one machine.
package node
