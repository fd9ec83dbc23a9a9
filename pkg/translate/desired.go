package translate

import (
	"slices"
	"strings"
)

// UnassignedKey holds the drop rows of --unassigned-traffic=drop.
const UnassignedKey Key = "unassigned"

// Desired is the outcome of a translation: the rows per key and the problems.
type Desired struct {
	Rows     map[Key]*Rows
	Problems Problems
	// ReleaseClusterRoutes: owned cluster routes nobody wants any more are
	// handed over (their ovn-egress external_ids removed), not deleted:
	// ovn-kubernetes relies on them (Input.ClusterRouteShared).
	ReleaseClusterRoutes bool
}

// Keys returns the keys that have rows, sorted.
func (d *Desired) Keys() []Key {
	out := make([]Key, 0, len(d.Rows))
	for k := range d.Rows {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Count returns the number of rows per table name.
func (d *Desired) Count() (addressSets, policies, nats, addresses int) {
	for _, r := range d.Rows {
		addressSets += len(r.AddressSets)
		policies += len(r.Policies)
		nats += len(r.NATs)
		for _, as := range r.AddressSets {
			addresses += len(as.Addresses)
		}
	}
	return
}

// Owner types of EgressIP rows.
const (
	// OwnerEgressIP: an object's address set and its policies on ovn_cluster_router.
	OwnerEgressIP = "EgressIP"
	// OwnerEgressIPNAT: its SNAT rows on the assigned nodes' gateway routers.
	OwnerEgressIPNAT = "EgressIPNAT"
)

// egressIPKeyPrefix starts the keys of EgressIP rows.
const egressIPKeyPrefix = "egressip/"

// EgressIPKey is the key of one EgressIP's rows: its set, policies and SNATs
// are written in one transaction.
func EgressIPKey(name string) Key { return Key(egressIPKeyPrefix + name) }

// EgressIP returns the object name of an EgressIP key.
func (k Key) EgressIP() (string, bool) { return strings.CutPrefix(string(k), egressIPKeyPrefix) }

// Merge adds o's rows and problems to d; a key in both is o's (the callers
// merge translations of disjoint keys: EgressServices and EgressIPs).
func (d *Desired) Merge(o *Desired) {
	if d.Rows == nil {
		d.Rows = map[Key]*Rows{}
	}
	for k, r := range o.Rows {
		d.Rows[k] = r
	}
	d.Problems = append(d.Problems, o.Problems...)
}
