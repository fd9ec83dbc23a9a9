package ovn

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Gateways reads the GR facts translation needs for each node from the NB
// cache: the join addresses of rtoj-GR_<node>, whether etor-GR_<node>
// announces NAT addresses, and the GR's own SNAT of the cluster subnets.
// Nodes without a GR in NB are left out.
func Gateways(ctx context.Context, c client.Client, nodes []string, clusterSubnets []netip.Prefix) map[string]translate.GatewayInfo {
	out := map[string]translate.GatewayInfo{}
	for _, node := range nodes {
		gr := translate.GatewayRouter(node)
		gw := translate.GatewayInfo{JoinIPs: map[ipfamily.Family]netip.Addr{}, SNAT: gatewaySNAT(ctx, c, gr, clusterSubnets)}
		lrp := &nbdb.LogicalRouterPort{Name: "rtoj-" + gr}
		if err := c.Get(ctx, lrp); err == nil {
			for _, n := range lrp.Networks {
				if p, err := netip.ParsePrefix(n); err == nil {
					gw.JoinIPs[ipfamily.OfPrefix(p)] = ipfamily.Canonical(p.Addr())
				}
			}
		}
		lsp := &nbdb.LogicalSwitchPort{Name: "etor-" + gr}
		if err := c.Get(ctx, lsp); err == nil {
			gw.ExternalPortKnown = true
			gw.NATAddressesRouter = lsp.Options["nat-addresses"] == "router"
		}
		if len(gw.JoinIPs) > 0 || gw.ExternalPortKnown {
			out[node] = gw
		}
	}
	return out
}

// gatewaySNAT finds, per family, the snat row on router gr that ovn-egress
// does not own and whose logical_ip is one of the cluster subnets: the
// address ovn-kubernetes gives the node's pods (nil when there is none).
func gatewaySNAT(ctx context.Context, c client.Client, gr string, clusterSubnets []netip.Prefix) map[ipfamily.Family]translate.GatewaySNAT {
	lr := &nbdb.LogicalRouter{Name: gr}
	if err := c.Get(ctx, lr); err != nil {
		return nil
	}
	var out map[ipfamily.Family]translate.GatewaySNAT
	for _, u := range lr.Nat {
		r, err := getNAT(ctx, c, u)
		if err != nil || r.Type != string(nbdb.NATTypeSNAT) || r.Match != "" {
			continue
		}
		if _, owned := translate.KeyOf(r.ExternalIDs); owned {
			continue
		}
		p, err1 := netip.ParsePrefix(r.LogicalIP)
		ext, err2 := netip.ParseAddr(r.ExternalIP)
		if err1 != nil || err2 != nil || !slices.ContainsFunc(clusterSubnets, func(s netip.Prefix) bool { return s.Masked() == p.Masked() }) {
			continue
		}
		f := ipfamily.OfPrefix(p)
		if _, seen := out[f]; seen {
			continue
		}
		if out == nil {
			out = map[ipfamily.Family]translate.GatewaySNAT{}
		}
		out[f] = translate.GatewaySNAT{ExternalIP: ipfamily.Canonical(ext), PortRange: r.ExternalPortRange}
	}
	return out
}

// CurrentMembers adds the addresses of the node keys' owned address sets,
// as the NB cache has them, to into (by address-set name): what the
// readiness handshake keeps while an agent catches up. The addresses are
// the cache's own: READ ONLY.
func CurrentMembers(ctx context.Context, c client.Client, keys []translate.Key, into map[string][]string) error {
	nodes := map[translate.Key]bool{}
	for _, k := range keys {
		if k.IsNode() {
			nodes[k] = true
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	sets, err := ownedByKey(ctx, c, nbdb.AddressSetTable, nodes, addressSetProbe, addressSetIDs, addressSetUUID)
	if err != nil {
		return err
	}
	for _, ss := range sets {
		for _, s := range ss {
			into[s.Name] = s.Addresses
		}
	}
	return nil
}

// AddressSetMembers returns the addresses of the address set name as the
// NB cache has it (nil when there is none).
func AddressSetMembers(c client.Client, name string) []string {
	as := &nbdb.AddressSet{Name: name}
	if err := c.Get(context.Background(), as); err != nil {
		return nil
	}
	return as.Addresses
}

// ForeignClusterRoutes returns the cluster subnets that already have a
// src-ip static route on ovn_cluster_router that ovn-egress does not own
// (ovn-kubernetes adds one per zone when its egress features are on).
func ForeignClusterRoutes(ctx context.Context, c client.Client, clusterSubnets []netip.Prefix) (map[netip.Prefix]bool, error) {
	var routers []nbdb.LogicalRouter
	err := c.Where(&nbdb.LogicalRouter{Name: translate.ClusterRouter}).List(ctx, &routers)
	if err != nil && err != client.ErrNotFound {
		return nil, fmt.Errorf("read %s: %w", translate.ClusterRouter, err)
	}
	out := map[netip.Prefix]bool{}
	routes := cachedRows(c, nbdb.LogicalRouterStaticRouteTable) // in place: a zone has a route per remote node
	for _, lr := range routers {
		for _, u := range lr.StaticRoutes {
			r, ok := routes[u].(*nbdb.LogicalRouterStaticRoute)
			if !ok {
				continue
			}
			if _, owned := translate.KeyOf(r.ExternalIDs); owned || r.Policy == nil || *r.Policy != nbdb.LogicalRouterStaticRoutePolicySrcIP {
				continue
			}
			p, err := netip.ParsePrefix(r.IPPrefix)
			if err != nil {
				continue
			}
			for _, s := range clusterSubnets {
				if p.Masked() == s.Masked() {
					out[s.Masked()] = true
				}
			}
		}
	}
	return out, nil
}

// The marks of ovn-kubernetes' own egress-service rows (its
// EgressServiceZoneController): the external id of its reroute policies, and
// the k8s.ovn.org/name of its served-pods address sets.
const (
	EgressSVCKey          = "EgressSVC"
	EgressSVCServedPods   = "egresssvc-served-pods"
	ovnKubeControllerName = "default-network-controller"
)

// ForeignEgressService reads, from the cache, what ovn-kubernetes' own
// egress-service handling has in NB: its reroute policies at priority (an
// EgressSVC external id), the addresses of its egresssvc-served-pods sets,
// and the EgressServices its policies name ("namespace/name", sorted).
func ForeignEgressService(ctx context.Context, c client.Client, priority int) (policies, servedPods int, services []string, err error) {
	names := map[string]bool{}
	var pols []nbdb.LogicalRouterPolicy
	err = c.WhereCache(func(p *nbdb.LogicalRouterPolicy) bool {
		_, ok := p.ExternalIDs[EgressSVCKey]
		return ok && p.Priority == priority
	}).List(ctx, &pols)
	if err != nil && err != client.ErrNotFound {
		return 0, 0, nil, fmt.Errorf("list EgressSVC policies: %w", err)
	}
	for _, p := range pols {
		key, _, _ := strings.Cut(p.ExternalIDs[EgressSVCKey], ":") // "<ns>/<name>:ic" for remote endpoints
		names[key] = true
	}
	var sets []nbdb.AddressSet
	err = c.WhereCache(func(s *nbdb.AddressSet) bool {
		return s.ExternalIDs[translate.KeyName] == EgressSVCServedPods && s.ExternalIDs[translate.KeyOwnerController] == ovnKubeControllerName
	}).List(ctx, &sets)
	if err != nil && err != client.ErrNotFound {
		return 0, 0, nil, fmt.Errorf("list %s: %w", EgressSVCServedPods, err)
	}
	for _, s := range sets {
		servedPods += len(s.Addresses)
	}
	return len(pols), servedPods, slices.Sorted(maps.Keys(names)), nil
}

// HasRemotePorts reports whether NB has a logical switch port of type
// remote: ovn-kubernetes' transit switch of an interconnect zone.
func HasRemotePorts(ctx context.Context, c client.Client) (bool, error) {
	var lsps []nbdb.LogicalSwitchPort
	err := c.WhereCache(func(p *nbdb.LogicalSwitchPort) bool { return p.Type == "remote" }).List(ctx, &lsps)
	if err != nil && err != client.ErrNotFound {
		return false, fmt.Errorf("list remote ports: %w", err)
	}
	return len(lsps) > 0, nil
}

// OVNKubeEgressIPActive reports whether ovn-kubernetes' EgressIP feature has
// rows in this NB (its no-reroute allow policies, owner-type EgressIP): it
// then keeps the cluster src-ip route of every local node itself. Every
// sync of a zone asks (a scan of every policy): the cache's rows are read in
// place, not copied and matched through reflection as WhereCache does —
// with ForeignClusterRoutes that was more than half of a zone's sync CPU
// at 5,000 nodes (bench zone -size=envelope, profiled).
func OVNKubeEgressIPActive(ctx context.Context, c client.Client) (bool, error) {
	for _, m := range cachedRows(c, nbdb.LogicalRouterPolicyTable) {
		if p, ok := m.(*nbdb.LogicalRouterPolicy); ok &&
			p.ExternalIDs[translate.KeyOwnerController] == ovnKubeControllerName && p.ExternalIDs[translate.KeyOwnerType] == "EgressIP" {
			return true, nil
		}
	}
	return false, ctx.Err()
}

// IsOVNKubeNoReroute reports whether a policy is one of ovn-kubernetes'
// EgressIP no-reroute policies (they come and go with its EgressIP).
func IsOVNKubeNoReroute(p *nbdb.LogicalRouterPolicy) bool {
	ids := p.ExternalIDs
	return ids[translate.KeyOwnerController] != translate.OwnerController && ids[translate.KeyOwnerType] == "EgressIP" &&
		strings.HasPrefix(ids[translate.KeyName], "EIP-No-Reroute")
}

// EgressIPServedPods is the k8s.ovn.org/name of ovn-kubernetes' EgressIP
// served-pods address sets.
const EgressIPServedPods = "egressip-served-pods"

// IsOVNKubeEgressIP reports whether external ids are ovn-kubernetes' own
// EgressIP feature's (its default network controller, owner-type EgressIP).
func IsOVNKubeEgressIP(ids map[string]string) bool {
	return ids[translate.KeyOwnerController] == ovnKubeControllerName && ids[translate.KeyOwnerType] == "EgressIP"
}

// OVNKubeEgressIPServing counts the rows by which ovn-kubernetes' own
// EgressIP feature serves pods in this NB: its EgressIP reroute policies,
// its EgressIP SNATs, and the addresses of its egressip-served-pods sets.
// Its no-reroute allow policies (EIP-No-Reroute-*, priority 102) do not
// count: its egress-service feature writes them too, and leaves them
// behind when turned off (seen with the real binaries), so they say
// nothing about its EgressIP serving anyone.
func OVNKubeEgressIPServing(ctx context.Context, c client.Client) (int, error) {
	n := 0
	for _, m := range cachedRows(c, nbdb.LogicalRouterPolicyTable) {
		if p, ok := m.(*nbdb.LogicalRouterPolicy); ok && IsOVNKubeEgressIP(p.ExternalIDs) && p.Action == nbdb.LogicalRouterPolicyActionReroute {
			n++
		}
	}
	for _, m := range cachedRows(c, nbdb.NATTable) {
		if ids, ok := NATExternalIDs(m); ok && IsOVNKubeEgressIP(ids) {
			n++
		}
	}
	for _, m := range cachedRows(c, nbdb.AddressSetTable) {
		if s, ok := m.(*nbdb.AddressSet); ok && s.ExternalIDs[translate.KeyOwnerController] == ovnKubeControllerName &&
			s.ExternalIDs[translate.KeyName] == EgressIPServedPods {
			n += len(s.Addresses)
		}
	}
	return n, ctx.Err()
}

// OVNKubeNoReroutePolicies lists ovn-kubernetes' EgressIP no-reroute allow
// policies (EIP-No-Reroute-*), from the cache.
func OVNKubeNoReroutePolicies(c client.Client) []*nbdb.LogicalRouterPolicy {
	var out []*nbdb.LogicalRouterPolicy
	for _, m := range cachedRows(c, nbdb.LogicalRouterPolicyTable) {
		if p, ok := m.(*nbdb.LogicalRouterPolicy); ok && IsOVNKubeEgressIP(p.ExternalIDs) &&
			strings.HasPrefix(p.ExternalIDs[translate.KeyName], "EIP-No-Reroute") {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *nbdb.LogicalRouterPolicy) int { return strings.Compare(a.UUID, b.UUID) })
	return out
}

// cachedRows are table's rows in c's cache, READ ONLY: the map is a copy,
// the rows are the cache's own (it replaces a row on update, never edits it).
func cachedRows(c client.Client, table string) map[string]model.Model {
	if tc := c.Cache(); tc != nil {
		if t := tc.Table(table); t != nil {
			return t.RowsShallow()
		}
	}
	return nil
}

// ForeignPolicies lists the router policies ovn-egress does not own at the
// given priorities, from the cache.
func ForeignPolicies(ctx context.Context, c client.Client, priorities []int) ([]nbdb.LogicalRouterPolicy, error) {
	var pols []nbdb.LogicalRouterPolicy
	err := c.WhereCache(func(p *nbdb.LogicalRouterPolicy) bool {
		_, ours := translate.KeyOf(p.ExternalIDs)
		return !ours && slices.Contains(priorities, p.Priority)
	}).List(ctx, &pols)
	if err != nil && err != client.ErrNotFound {
		return nil, fmt.Errorf("list foreign policies: %w", err)
	}
	return pols, nil
}

// matchSourceRE finds the literal source addresses a match names
// ("ip4.src == 10.244.0.3", "ip6.src == {a, b}").
var matchSourceRE = regexp.MustCompile(`ip[46]\.src\s*==\s*(\{[^}]*\}|[0-9a-fA-F.:]+)`)

// MatchSources returns the literal source addresses of a policy match (not
// address sets, not prefixes), canonical.
func MatchSources(match string) []string {
	var out []string
	for _, m := range matchSourceRE.FindAllStringSubmatch(match, -1) {
		for _, f := range strings.FieldsFunc(strings.Trim(m[1], "{}"), func(r rune) bool { return r == ',' || r == ' ' }) {
			if ip, err := netip.ParseAddr(f); err == nil {
				out = append(out, ipfamily.Canonical(ip).String())
			}
		}
	}
	return out
}
