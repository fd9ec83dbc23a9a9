package node

import (
	"context"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// The nftables layout the agent owns: one table, never anyone else's.
//
//	table inet ovn-egress {
//	  map snat-v4 { type ipv4_addr : ipv4_addr }   # endpoint → SNAT IP, comment "ns/name"
//	  map snat-v6 { type ipv6_addr : ipv6_addr }
//	  chain pod-snat {    # nat, postrouting, priority srcnat-10
//	    meta mark 0x3f0 return                      # ovn-kubernetes' DoNotSNAT mark
//	    oifname "ovn-k8s-mp0" return                # back into the cluster
//	    ip daddr { <cluster subnets> } return       # to pods
//	    ip6 daddr { <cluster subnets> } return
//	    ip daddr { <node addresses> } return        # to nodes: the node's own NAT
//	    ip6 daddr { <node addresses> } return
//	    snat ip to ip saddr map @snat-v4
//	    snat ip6 to ip6 saddr map @snat-v6
//	  }
//	  counter leak-guard-invalid {}    # the drops below, by rule; named
//	  counter leak-guard-unsnatted {}  # counters survive chain rewrites
//	  counter leak-guard-withdrawn {}
//	  chain leak-guard {  # filter, postrouting, priority srcnat+10
//	    (the same three returns)
//	    ct state invalid ip saddr { <cluster subnets> } counter name "leak-guard-invalid" drop   # skipped every NAT
//	    ct state invalid ip6 saddr { <cluster subnets> } counter name "leak-guard-invalid" drop
//	    ip saddr @snat-v4 counter name "leak-guard-unsnatted" drop    # an endpoint that was not SNATed
//	    ip6 saddr @snat-v6 counter name "leak-guard-unsnatted" drop
//	    ip saddr @withdrawn-v4 counter name "leak-guard-withdrawn" drop  # SNAT removed lately
//	    ip6 saddr @withdrawn-v6 counter name "leak-guard-withdrawn" drop
//	  }
//	  set withdrawn-v4 { type ipv4_addr; timeout 10m }  # endpoints whose SNAT
//	  set withdrawn-v6 { type ipv6_addr; timeout 10m }  # went, WithdrawnHold
//	  chain forward-guard {  # filter, forward; only where IPv6 forwarding was off
//	    iifname "ovn-k8s-mp0" return
//	    oifname "ovn-k8s-mp0" return
//	    meta nfproto ipv6 drop
//	  }
//	}
//
// What is never SNATed: traffic that goes back into the cluster — out of
// the management port (ovn-k8s-mp0) or to a cluster subnet — keeps its pod
// source so pod-to-pod identity and the replies' path through OVN stay
// intact; packets carrying ovn-kubernetes' DoNotSNAT mark (0x3f0, set by
// its "allow" policies for pod → node traffic) likewise.
//
// The SNAT chain runs at srcnat-10 so it wins over masquerade rules at
// srcnat (iptables, ovn-kubernetes' own tables): the first NAT binding of a
// connection sticks. The leak guard runs after NAT: a packet of a mapped
// endpoint that still carries the endpoint's address would leak the pod IP
// — conntrack-invalid packets skip the nat chains (reference/hostpath.md
// §1) — so it is dropped; so is any conntrack-invalid packet from a pod
// subnet leaving the host, which no NAT (the agent's or a masquerade) saw.
const (
	TableName  = "ovn-egress"
	snatChain  = "pod-snat"
	guardChain = "leak-guard"
	// The leak guard's drops, each a packet that would have left the node
	// with a pod address, are counted by rule in named counters (rewriting
	// the chain does not reset them): conntrack-invalid packets of pods —
	// the remains of a connection that moved host or lost its route — and
	// packets of a served endpoint that no SNAT rewrote.
	// forwardChain (filter, forward): only while the agent turned IPv6
	// forwarding on for the host path on a node where it was off — every
	// forwarded IPv6 packet that neither enters nor leaves by the
	// management port is dropped, so the node still forwards nothing else
	// (forwarding.go).
	forwardChain   = "forward-guard"
	guardInvalid   = "leak-guard-invalid"
	guardUnsnatted = "leak-guard-unsnatted"
	guardWithdrawn = "leak-guard-withdrawn"
	// WithdrawnHold is how long an endpoint whose SNAT the agent removed
	// stays in the withdrawn sets: its packets that still reach this node
	// unSNATed — a reroute the master could not take out yet, as during an
	// NB outage longer than --withdraw-grace (found by the chaos soak) —
	// are dropped instead of leaving with the pod address.
	WithdrawnHold  = 10 * time.Minute
	doNotSNATMark  = "0x3f0"
	tableComment   = "owned by ovn-egress node agent; changes are overwritten"
	snatPriority   = knftables.BaseChainPriority("srcnat-10")
	guardPriority  = knftables.BaseChainPriority("srcnat+10")
	ruleHashLength = 8
)

func snatMap(f ipfamily.Family) string { return "snat-" + string(f) }

// withdrawnSet holds the endpoints of family f whose SNAT was removed in
// the last WithdrawnHold (each element expires on its own).
func withdrawnSet(f ipfamily.Family) string { return "withdrawn-" + string(f) }

func nftAddrType(f ipfamily.Family) string {
	if f == ipfamily.V6 {
		return "ipv6_addr"
	}
	return "ipv4_addr"
}

// nftMatch is the nft payload expression prefix: "ip" or "ip6".
func nftMatch(f ipfamily.Family) string {
	if f == ipfamily.V6 {
		return "ip6"
	}
	return "ip"
}

// guardDrop ends a drop rule of the leak guard, counted in counter.
func guardDrop(counter string) string { return `counter name "` + counter + `" drop` }

// chainRule is one rule of a chain with the comment that identifies it.
type chainRule struct{ text, comment string }

// chainRules renders the fixed rules of both chains. Each comment ends
// with a hash of the rule text, so a changed rule (new cluster subnets, a
// new agent version) is noticed from the comments alone — knftables lists
// rules by handle and comment, not by text.
func chainRules(mgmtPort string, noSNAT []netip.Prefix, nodeIPs []netip.Addr) (snat, guard []chainRule) {
	mk := hashed
	var keep []chainRule
	keep = append(keep, mk("do-not-snat-mark", "meta mark "+doNotSNATMark+" return"))
	if mgmtPort != "" {
		keep = append(keep, mk("to-cluster-via-mgmt-port", fmt.Sprintf("oifname %q return", mgmtPort)))
	}
	for _, f := range ipfamily.All {
		var ps []string
		for _, p := range noSNAT {
			if ipfamily.OfPrefix(p) == f {
				ps = append(ps, p.Masked().String())
			}
		}
		if len(ps) > 0 {
			keep = append(keep, mk("to-cluster-"+string(f),
				fmt.Sprintf("%s daddr { %s } return", nftMatch(f), strings.Join(ps, ", "))))
		}
		var ips []string
		for _, ip := range nodeIPs {
			if ipfamily.Of(ip) == f {
				ips = append(ips, ip.String())
			}
		}
		if len(ips) > 0 {
			keep = append(keep, mk("to-node-"+string(f),
				fmt.Sprintf("%s daddr { %s } return", nftMatch(f), strings.Join(ips, ", "))))
		}
	}
	snat = append(snat, keep...)
	guard = append(guard, keep...)
	// Conntrack-invalid packets skip every nat chain, so a pod-sourced one
	// leaves with the pod address whatever should have translated it: the
	// agent's SNAT map, or the masquerade a Network-mode service relies on
	// (seen in the local e2e: a connection that started through the
	// gateway router and continued through the host after the reroute).
	for _, f := range ipfamily.All {
		var ps []string
		for _, p := range noSNAT {
			if ipfamily.OfPrefix(p) == f {
				ps = append(ps, p.Masked().String())
			}
		}
		if len(ps) > 0 {
			guard = append(guard, mk("invalid-from-cluster-"+string(f),
				fmt.Sprintf("ct state invalid %s saddr { %s } %s", nftMatch(f), strings.Join(ps, ", "), guardDrop(guardInvalid))))
		}
	}
	for _, f := range ipfamily.All {
		m := nftMatch(f)
		snat = append(snat, mk("snat-"+string(f), fmt.Sprintf("snat %s to %s saddr map @%s", m, m, snatMap(f))))
		guard = append(guard, mk("unsnatted-"+string(f), fmt.Sprintf("%s saddr @%s %s", m, snatMap(f), guardDrop(guardUnsnatted))))
		guard = append(guard, mk("withdrawn-"+string(f), fmt.Sprintf("%s saddr @%s %s", m, withdrawnSet(f), guardDrop(guardWithdrawn))))
	}
	return snat, guard
}

// hashed is a rule whose comment ends with a hash of its text.
func hashed(name, text string) chainRule {
	h := fnv.New32a()
	h.Write([]byte(text))
	return chainRule{text: text, comment: fmt.Sprintf("%s %0*x", name, ruleHashLength, h.Sum32())}
}

// forwardRules keep IPv6 forwarding to the host path (forwardChain).
func forwardRules(mgmtPort string) []chainRule {
	return []chainRule{
		hashed("from-mgmt-port", fmt.Sprintf("iifname %q return", mgmtPort)),
		hashed("to-mgmt-port", fmt.Sprintf("oifname %q return", mgmtPort)),
		hashed("no-other-ipv6-forwarding", "meta nfproto ipv6 drop"),
	}
}

// nftState is what the agent found in its table.
type nftState struct {
	elements map[netip.Addr]nodeplan.SNATElement // by endpoint
	chains   map[string][]string                 // chain → rule comments, in order
}

// listNFT reads the agent's table through knftables, one object per nft
// run (TableReader reads it in one); a missing table, map or chain reads
// as empty.
func listNFT(ctx context.Context, nft knftables.Interface) (nftState, error) {
	st := nftState{elements: map[netip.Addr]nodeplan.SNATElement{}, chains: map[string][]string{}}
	for _, f := range ipfamily.All {
		elems, err := nft.ListElements(ctx, "map", snatMap(f))
		if knftables.IsNotFound(err) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("list map %s: %w", snatMap(f), err)
		}
		for _, e := range elems {
			se, ok := elementFromNFT(f, e)
			if !ok {
				// Not an element the agent writes; the map is typed, so
				// this is unreachable short of a changed map type.
				continue
			}
			st.elements[se.Endpoint] = se
		}
	}
	for _, c := range []string{snatChain, guardChain, forwardChain} {
		rules, err := nft.ListRules(ctx, c)
		if knftables.IsNotFound(err) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("list chain %s: %w", c, err)
		}
		comments := []string{}
		for _, r := range rules {
			c := ""
			if r.Comment != nil {
				c = *r.Comment
			}
			comments = append(comments, c)
		}
		st.chains[c] = comments
	}
	return st, nil
}

func elementFromNFT(f ipfamily.Family, e *knftables.Element) (nodeplan.SNATElement, bool) {
	if len(e.Key) != 1 || len(e.Value) != 1 {
		return nodeplan.SNATElement{}, false
	}
	k, err1 := netip.ParseAddr(e.Key[0])
	v, err2 := netip.ParseAddr(e.Value[0])
	if err1 != nil || err2 != nil || ipfamily.Of(k) != f {
		return nodeplan.SNATElement{}, false
	}
	se := nodeplan.SNATElement{Family: f, Endpoint: ipfamily.Canonical(k), SNATIP: ipfamily.Canonical(v)}
	if e.Comment != nil {
		se.Owner = *e.Comment
	}
	return se, true
}

func nftElement(e nodeplan.SNATElement) *knftables.Element {
	el := &knftables.Element{Map: snatMap(e.Family), Key: []string{e.Endpoint.String()}, Value: []string{e.SNATIP.String()}}
	if e.Owner != "" {
		el.Comment = knftables.PtrTo(e.Owner)
	}
	return el
}

// nftPlan is the two transactions that take the table to the desired state.
type nftPlan struct {
	// adds creates the table, maps and chains if missing, rewrites chains
	// whose rules differ, adds missing elements and replaces changed ones.
	adds *knftables.Transaction
	// deletes removes the elements nobody wants.
	deletes *knftables.Transaction
	// upserted and removed are the elements each transaction writes.
	upserted, removed []nodeplan.SNATElement
	// structure: adds creates the table or rewrites a chain. A chain's
	// rules reference the maps, so chains as wanted imply the maps exist.
	structure bool
}

func planNFT(nft knftables.Interface, have nftState, want nodeplan.NodeState, cfg ApplierConfig, forwardGuard bool) nftPlan {
	p := nftPlan{adds: nft.NewTransaction(), deletes: nft.NewTransaction()}
	snatRules, guardRules := chainRules(cfg.MgmtPort, want.NoSNAT, want.NodeIPs)
	type chain struct {
		name     string
		typ      knftables.BaseChainType
		hook     knftables.BaseChainHook
		priority knftables.BaseChainPriority
		rules    []chainRule
	}
	chains := []chain{{snatChain, knftables.NATType, knftables.PostroutingHook, snatPriority, snatRules},
		{guardChain, knftables.FilterType, knftables.PostroutingHook, guardPriority, guardRules}}
	if forwardGuard {
		chains = append(chains, chain{forwardChain, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority, forwardRules(cfg.MgmtPort)})
	}

	p.adds.Add(&knftables.Table{Comment: knftables.PtrTo(tableComment)})
	for _, f := range ipfamily.All {
		p.adds.Add(&knftables.Map{Name: snatMap(f), Type: nftAddrType(f) + " : " + nftAddrType(f),
			Comment: knftables.PtrTo("endpoint -> SNAT address; element comments name the EgressService")})
	}
	hold := cfg.WithdrawnHold
	for _, f := range ipfamily.All {
		p.adds.Add(&knftables.Set{Name: withdrawnSet(f), Type: nftAddrType(f), Timeout: &hold,
			Comment: knftables.PtrTo("endpoints whose SNAT was removed lately: their unSNATed packets are dropped")})
	}
	// Adding an existing counter keeps its value.
	p.adds.Add(&knftables.Counter{Name: guardInvalid, Comment: knftables.PtrTo("conntrack-invalid pod packets the leak guard dropped")})
	p.adds.Add(&knftables.Counter{Name: guardUnsnatted, Comment: knftables.PtrTo("packets of served endpoints no SNAT rewrote, dropped")})
	p.adds.Add(&knftables.Counter{Name: guardWithdrawn, Comment: knftables.PtrTo("unSNATed packets of endpoints whose SNAT was removed lately, dropped")})
	for _, c := range chains {
		var comments []string
		for _, r := range c.rules {
			comments = append(comments, r.comment)
		}
		p.adds.Add(&knftables.Chain{Name: c.name, Type: knftables.PtrTo(c.typ), Hook: knftables.PtrTo(c.hook),
			Priority: knftables.PtrTo(c.priority), Policy: knftables.PtrTo(knftables.AcceptPolicy)})
		if slices.Equal(have.chains[c.name], comments) {
			continue
		}
		p.structure = true
		p.adds.Flush(&knftables.Chain{Name: c.name})
		for _, r := range c.rules {
			p.adds.Add(&knftables.Rule{Chain: c.name, Rule: r.text, Comment: knftables.PtrTo(r.comment)})
		}
	}

	wanted := make(map[netip.Addr]bool, len(want.SNAT))
	for _, e := range want.SNAT {
		wanted[e.Endpoint] = true
		old, ok := have.elements[e.Endpoint]
		if ok && old == e {
			continue
		}
		if ok {
			// A map key has one value: replace it in the same transaction.
			p.adds.Delete(nftElement(old))
		}
		p.adds.Add(nftElement(e))
		p.upserted = append(p.upserted, e)
	}
	for ep, e := range have.elements {
		if !wanted[ep] {
			// In the same transaction: never neither SNATed nor guarded.
			p.deletes.Delete(nftElement(e))
			guardWithdrawnEndpoint(p.deletes, e.Family, ep)
			p.removed = append(p.removed, e)
		}
	}
	return p
}

// guardWithdrawnEndpoint puts ep into its family's withdrawn set for a
// full hold from now. Adding an element that is already there keeps its
// old expiry (the kernel does not refresh it): an endpoint withdrawn again
// within the hold of an earlier withdrawal would lose its guard when the
// earlier one expires — the leak the 20-minute chaos run found. Add (a
// no-op if present), delete, add again: one transaction, so the element
// is never missing, and it always expires a full hold after this
// withdrawal.
func guardWithdrawnEndpoint(tx *knftables.Transaction, f ipfamily.Family, ep netip.Addr) {
	el := func() *knftables.Element { return &knftables.Element{Set: withdrawnSet(f), Key: []string{ep.String()}} }
	tx.Add(el())
	tx.Delete(el())
	tx.Add(el())
}

// GuardDrops are the leak guard's drop counters.
type GuardDrops struct {
	// Invalid: conntrack-invalid packets from a pod subnet (a connection
	// that moved host or lost its route sends a few).
	Invalid uint64
	// Unsnatted: packets of a served endpoint that left without its SNAT.
	Unsnatted uint64
	// Withdrawn: unSNATed packets of an endpoint whose SNAT was removed in
	// the last WithdrawnHold (a reroute still pointing here).
	Withdrawn uint64
}

// guardDrops reads the leak guard's counters (0 while the table or a
// counter does not exist yet).
func guardDrops(ctx context.Context, nft knftables.Interface) (GuardDrops, error) {
	var d GuardDrops
	cs, err := nft.ListCounters(ctx)
	if knftables.IsNotFound(err) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("list counters: %w", err)
	}
	for _, c := range cs {
		if c.Packets == nil {
			continue
		}
		switch c.Name {
		case guardInvalid:
			d.Invalid = *c.Packets
		case guardUnsnatted:
			d.Unsnatted = *c.Packets
		case guardWithdrawn:
			d.Withdrawn = *c.Packets
		}
	}
	return d, nil
}
