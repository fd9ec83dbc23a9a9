package translation

import (
	"net/netip"
	"strings"

	libcache "github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// nbHandler maps NB cache events to keys of both translators: any change
// to an owned row (so rows removed or edited by someone else are put back)
// but an address set left as the worker wants it (wantedSets), gateway
// router ports (join addresses, NAT announcement), routers appearing, and
// in a zone the rows of others that decide who routes the zone's traffic.
func (c *Controller) nbHandler() libcache.EventHandler {
	onRow := func(m model.Model, deleted bool) {
		if c.eip != nil {
			if keys := egressIPRowKeys(m); len(keys) > 0 {
				c.work.Add(keys...)
			}
		}
		if ids, ok := ovn.NATExternalIDs(m); ok { // either NAT model
			c.addOwned(ids)
			return
		}
		switch r := m.(type) {
		case *nbdb.AddressSet:
			// The echo of the worker's own write needs no sync (wantedSets).
			if (deleted && c.wanted.isWanted(r)) || (!deleted && !c.wanted.asWanted(r)) {
				c.addOwned(r.ExternalIDs)
			}
		case *nbdb.LogicalRouterPolicy:
			if c.cfg.Zone != "" && ovn.IsOVNKubeNoReroute(r) {
				// ovn-kubernetes' EgressIP came or went: who keeps the
				// zone's cluster routes changes (ZoneFacts.ClusterRouteShared).
				c.work.Add(rowsKey(translate.ClusterKey)) // every sync reads the zone's facts
				return
			}
			c.addOwned(r.ExternalIDs)
		case *nbdb.LogicalRouterStaticRoute:
			if _, ours := translate.KeyOf(r.ExternalIDs); !ours && c.cfg.Zone != "" && c.isClusterRoute(r) {
				// Someone else's cluster src-ip route came or went: the
				// zone's own is needed exactly while there is none
				// (ZoneFacts.ForeignClusterRoutes).
				c.work.Add(rowsKey(translate.ClusterKey))
				return
			}
			c.addOwned(r.ExternalIDs) // drift of an owned route (a cluster route) is put back
		case *nbdb.LogicalRouterPort:
			if gr, ok := strings.CutPrefix(r.Name, "rtoj-"); ok {
				c.addGR(gr)
			}
		case *nbdb.LogicalSwitchPort:
			if gr, ok := strings.CutPrefix(r.Name, "etor-"); ok {
				c.addGR(gr)
			}
		case *nbdb.LogicalRouter:
			if r.Name == translate.ClusterRouter {
				c.EnqueueAll() // the router every policy hangs off
			} else {
				c.addGR(r.Name)
			}
		}
	}
	return &libcache.EventHandlerFuncs{
		AddFunc: func(_ string, m model.Model) { onRow(m, false) },
		UpdateFunc: func(_ string, old, cur model.Model) {
			if lr, ok := cur.(*nbdb.LogicalRouter); ok {
				// Routers change whenever a policy or NAT row is attached;
				// only a rename matters.
				if o, ok := old.(*nbdb.LogicalRouter); ok && o.Name == lr.Name {
					return
				}
			}
			onRow(cur, false)
		},
		DeleteFunc: func(_ string, m model.Model) { onRow(m, true) },
	}
}

// isClusterRoute reports whether r is a src-ip route of one of the
// cluster subnets (who routes the zone's traffic to its gateway router).
func (c *Controller) isClusterRoute(r *nbdb.LogicalRouterStaticRoute) bool {
	if r.Policy == nil || *r.Policy != nbdb.LogicalRouterStaticRoutePolicySrcIP {
		return false
	}
	p, err := netip.ParsePrefix(r.IPPrefix)
	if err != nil {
		return false
	}
	for _, s := range c.cfg.Translate.ClusterSubnets {
		if p.Masked() == s.Masked() {
			return true
		}
	}
	return false
}

// addOwned enqueues the key of an owned row.
func (c *Controller) addOwned(ids map[string]string) {
	k, ok := translate.KeyOf(ids)
	if !ok {
		return
	}
	if _, eip := k.EgressIP(); !eip {
		c.work.Add(rowsKey(k))
	}
}

// addGR enqueues the node of a gateway router.
func (c *Controller) addGR(name string) {
	if node, ok := strings.CutPrefix(name, "GR_"); ok {
		c.work.Add(nodeRowsKey(node))
	}
}
