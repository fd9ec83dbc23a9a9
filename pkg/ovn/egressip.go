package ovn

import (
	"context"
	"net/netip"

	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// EgressIPFacts reads from the NB cache what the EgressIP rows depend on:
// the keys of the EgressIP rows it holds (so that a deleted object's rows
// are swept), and, on an NB without NAT.match, the pod addresses that
// EgressService NAT rows already SNAT (translate.EgressIPRowsInput.Served).
func EgressIPFacts(ctx context.Context, c client.Client) ([]translate.Key, map[netip.Addr]bool, error) {
	owned, err := OwnedKeys(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	var keys []translate.Key
	for _, k := range owned {
		if _, eip := k.EgressIP(); eip {
			keys = append(keys, k)
		}
	}
	served, err := ServedAddresses(ctx, c)
	return keys, served, err
}

// ServedAddresses are, on an NB without NAT.match, the pod addresses that
// EgressService NAT rows already SNAT (none with NAT.match: the services'
// rows match their sets, at a higher priority).
func ServedAddresses(ctx context.Context, c client.Client) (map[netip.Addr]bool, error) {
	served := map[netip.Addr]bool{}
	if natWithMatch(c) {
		return served, nil
	}
	// In place (cachedRows): on the gateway path a cluster has a NAT row per
	// endpoint, and this runs at every EgressIP sync.
	for _, m := range cachedRows(c, nbdb.NATTable) {
		r, ok := m.(*nbdb.NAT)
		if !ok {
			continue
		}
		if _, ours := translate.KeyOf(r.ExternalIDs); !ours {
			continue
		}
		if t := r.ExternalIDs[translate.KeyOwnerType]; t == translate.OwnerEgressIP || t == translate.OwnerEgressIPNAT {
			continue
		}
		if a, err := netip.ParseAddr(r.LogicalIP); err == nil {
			served[a] = true
		}
	}
	return served, ctx.Err()
}
