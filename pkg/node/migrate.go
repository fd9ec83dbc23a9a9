package node

import (
	"context"
	"fmt"
	"slices"

	"sigs.k8s.io/knftables"
)

// What ovn-kubernetes' own egress-service node controller programs in its
// nftables table (ovn-kubernetes ≥ 2025; reference: its
// node/controllers/egressservice): provably its, by table and name.
const (
	OVNKubeTable          = "ovn-kubernetes"
	ovnKubeEgressChain    = "egress-services"
	ovnKubeEgressSNATMapV = "egress-service-snat-v"
)

// ovnKubeEgressMaps are the maps its chain reads.
var ovnKubeEgressMaps = []string{ovnKubeEgressSNATMapV + "4", ovnKubeEgressSNATMapV + "6"}

// NodeLeftover is one nftables object of ovn-kubernetes' built-in
// egress-service feature on this node.
type NodeLeftover struct {
	Kind string // chain | map
	Name string
	// Entries is the chain's rule count or the map's element count.
	Entries int
}

func (l NodeLeftover) String() string {
	unit := "rules"
	if l.Kind == "map" {
		unit = "elements"
	}
	return fmt.Sprintf("nftables %s inet %s %s (%d %s)", l.Kind, OVNKubeTable, l.Name, l.Entries, unit)
}

// NodeLeftovers lists ovn-kubernetes' egress-service chain and maps in its
// table inet ovn-kubernetes (nft is an interface on that table). Nothing
// else of the table is looked at.
func NodeLeftovers(ctx context.Context, nft knftables.Interface) ([]NodeLeftover, error) {
	chains, err := nft.List(ctx, "chains")
	if err != nil {
		if knftables.IsNotFound(err) {
			return nil, nil // no such table: nothing left
		}
		return nil, fmt.Errorf("list chains of inet %s: %w", OVNKubeTable, err)
	}
	var out []NodeLeftover
	if slices.Contains(chains, ovnKubeEgressChain) {
		rules, err := nft.ListRules(ctx, ovnKubeEgressChain)
		if err != nil {
			return nil, fmt.Errorf("list rules of %s: %w", ovnKubeEgressChain, err)
		}
		out = append(out, NodeLeftover{Kind: "chain", Name: ovnKubeEgressChain, Entries: len(rules)})
	}
	maps, err := nft.List(ctx, "maps")
	if err != nil && !knftables.IsNotFound(err) {
		return nil, fmt.Errorf("list maps of inet %s: %w", OVNKubeTable, err)
	}
	for _, m := range ovnKubeEgressMaps {
		if !slices.Contains(maps, m) {
			continue
		}
		els, err := nft.ListElements(ctx, "map", m)
		if err != nil {
			return nil, fmt.Errorf("list elements of %s: %w", m, err)
		}
		out = append(out, NodeLeftover{Kind: "map", Name: m, Entries: len(els)})
	}
	return out, nil
}

// RemoveNodeLeftovers deletes them in one nftables transaction: the chain
// first (its rules reference the maps), then the maps.
func RemoveNodeLeftovers(ctx context.Context, nft knftables.Interface, ls []NodeLeftover) error {
	if len(ls) == 0 {
		return nil
	}
	tx := nft.NewTransaction()
	for _, l := range ls {
		if l.Kind == "chain" {
			tx.Flush(&knftables.Chain{Name: l.Name})
			tx.Delete(&knftables.Chain{Name: l.Name})
		}
	}
	for _, l := range ls {
		if l.Kind == "map" {
			tx.Delete(&knftables.Map{Name: l.Name})
		}
	}
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("remove ovn-kubernetes' egress-service nftables objects: %w", err)
	}
	return nil
}

// MigrateNode lists (and with apply removes) ovn-kubernetes' egress-service
// nftables objects in the network namespace named netnsName ("": the host's).
func MigrateNode(ctx context.Context, netnsName string, apply bool) ([]NodeLeftover, error) {
	ns, err := OpenNamespace(netnsName)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	var ls []NodeLeftover
	err = ns.Do(func() error {
		nft, err := knftables.New(knftables.InetFamily, OVNKubeTable)
		if err != nil {
			return fmt.Errorf("nftables: %w", err)
		}
		if ls, err = NodeLeftovers(ctx, nft); err != nil || !apply {
			return err
		}
		return RemoveNodeLeftovers(ctx, nft, ls)
	})
	return ls, err
}
