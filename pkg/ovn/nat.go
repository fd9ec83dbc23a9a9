package ovn

import (
	"context"
	"fmt"
	"maps"
	"reflect"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/nbdbext"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// The NAT table's model follows the connected NB. pkg/nbdb is generated
// from NB 7.0.0 (OVN 23.03), the oldest NB ovn-egress supports: libovsdb
// refuses an NB that lacks any column of a model, while a newer NB's extra
// columns are simply not monitored. pkg/nbdbext's NAT has the newer
// NAT.match and NAT.priority; NewNBClient uses it only where the NB's schema
// has both. Everything here reads and writes NAT rows through natRow, so the
// rest of the package does not care which model is in use.

// Features are what the connected NB's schema offers beyond NB 7.0.0.
type Features struct {
	// SchemaVersion is the NB schema's version ("7.0.0", "7.11.0", ...).
	SchemaVersion string
	// NATMatch: NAT.match and NAT.priority exist (OVN ≥ 24.09), and the
	// client's model uses them.
	NATMatch bool
}

func (f Features) String() string {
	if f.NATMatch {
		return fmt.Sprintf("NB schema %s: NAT match supported", f.SchemaVersion)
	}
	return fmt.Sprintf("NB schema %s: no NAT match (OVN < 24.09)", f.SchemaVersion)
}

// schemaHasNATMatch reports whether a schema's NAT table has match and priority.
func schemaHasNATMatch(s ovsdb.DatabaseSchema) bool {
	t := s.Table(nbdb.NATTable)
	return t != nil && t.Column("match") != nil && t.Column("priority") != nil
}

// FeaturesOf returns the features of a connected client: the server's
// schema version, and NAT.match where the client's model uses it.
func FeaturesOf(c client.Client) Features {
	s := c.Schema()
	return Features{SchemaVersion: s.Version, NATMatch: natWithMatch(c)}
}

var extNATType = reflect.TypeOf(&nbdbext.NAT{})

// natWithMatch reports whether c's model has pkg/nbdbext's NAT.
func natWithMatch(c client.Client) bool {
	tc := c.Cache()
	return tc != nil && tc.DatabaseModel().FindTable(extNATType) == nbdb.NATTable
}

// natRow is a NAT row as ovn-egress reads it, whichever model is in use.
type natRow struct {
	UUID              string
	Type              string
	ExternalIP        string
	LogicalIP         string
	Match             string
	Priority          int
	ExternalPortRange string
	ExternalIDs       map[string]string
}

func fromBase(r *nbdb.NAT) natRow {
	return natRow{UUID: r.UUID, Type: string(r.Type), ExternalIP: r.ExternalIP, LogicalIP: r.LogicalIP,
		ExternalPortRange: r.ExternalPortRange, ExternalIDs: r.ExternalIDs}
}

func fromExt(r *nbdbext.NAT) natRow {
	return natRow{UUID: r.UUID, Type: string(r.Type), ExternalIP: r.ExternalIP, LogicalIP: r.LogicalIP, Match: r.Match,
		Priority: r.Priority, ExternalPortRange: r.ExternalPortRange, ExternalIDs: r.ExternalIDs}
}

// NATExternalIDs returns m's external_ids when m is a NAT row of either
// model. Code outside this package that meets NAT rows as models (cache
// events, cached rows) asks here: a type switch on *nbdb.NAT alone sees no
// NAT row at all of an NB whose schema has NAT.match.
func NATExternalIDs(m model.Model) (map[string]string, bool) {
	switch r := m.(type) {
	case *nbdb.NAT:
		return r.ExternalIDs, true
	case *nbdbext.NAT:
		return r.ExternalIDs, true
	}
	return nil, false
}

// ownedNATs returns the NAT rows ovn-egress owns under keys, by key
// (ownedByKey), whichever NAT model is in use.
func ownedNATs(ctx context.Context, c client.Client, keys map[translate.Key]bool) (map[translate.Key][]natRow, error) {
	out := make(map[translate.Key][]natRow, len(keys))
	if natWithMatch(c) {
		rows, err := ownedByKey(ctx, c, nbdb.NATTable, keys, func(name string) *nbdbext.NAT { return &nbdbext.NAT{ExternalIDs: nameIDs(name)} },
			func(r *nbdbext.NAT) map[string]string { return r.ExternalIDs }, func(r *nbdbext.NAT) string { return r.UUID })
		for k, rs := range rows {
			for i := range rs {
				out[k] = append(out[k], fromExt(&rs[i]))
			}
		}
		return out, err
	}
	rows, err := ownedByKey(ctx, c, nbdb.NATTable, keys, func(name string) *nbdb.NAT { return &nbdb.NAT{ExternalIDs: nameIDs(name)} },
		func(r *nbdb.NAT) map[string]string { return r.ExternalIDs }, func(r *nbdb.NAT) string { return r.UUID })
	for k, rs := range rows {
		for i := range rs {
			out[k] = append(out[k], fromBase(&rs[i]))
		}
	}
	return out, err
}

// getNAT reads one NAT row from the cache by UUID.
func getNAT(ctx context.Context, c client.Client, uuid string) (natRow, error) {
	if natWithMatch(c) {
		r := &nbdbext.NAT{UUID: uuid}
		err := c.Get(ctx, r)
		return fromExt(r), err
	}
	r := &nbdb.NAT{UUID: uuid}
	err := c.Get(ctx, r)
	return fromBase(r), err
}

// natOwners calls add with the external_ids of every NAT row in the cache.
func natOwners(ctx context.Context, c client.Client, add func(map[string]string) bool) error {
	var err error
	if natWithMatch(c) {
		var rows []nbdbext.NAT
		err = c.WhereCache(func(r *nbdbext.NAT) bool { return add(r.ExternalIDs) }).List(ctx, &rows)
	} else {
		var rows []nbdb.NAT
		err = c.WhereCache(func(r *nbdb.NAT) bool { return add(r.ExternalIDs) }).List(ctx, &rows)
	}
	if err != nil && err != client.ErrNotFound {
		return err
	}
	return nil
}

// natModel is the model of a new NAT row (UUID the named UUID to create it
// under). A row with a match needs an NB with NAT.match.
func natModel(c client.Client, n translate.NAT, uuid string) (model.Model, error) {
	if natWithMatch(c) {
		return &nbdbext.NAT{UUID: uuid, Type: nbdbext.NATType(n.Type), ExternalIP: n.ExternalIP, LogicalIP: n.LogicalIP,
			Match: n.Match, Priority: n.Priority, ExternalPortRange: n.ExternalPortRange, ExternalIDs: n.ExternalIDs}, nil
	}
	if n.Match != "" || n.Priority != 0 {
		return nil, fmt.Errorf("NAT row %s has a match, but the NB's NAT table has no match column", n.ExternalIDs[translate.KeyID])
	}
	return &nbdb.NAT{UUID: uuid, Type: nbdb.NATType(n.Type), ExternalIP: n.ExternalIP, LogicalIP: n.LogicalIP,
		ExternalPortRange: n.ExternalPortRange, ExternalIDs: n.ExternalIDs}, nil
}

// natUpdateOps rewrites an owned NAT row's columns to want.
func natUpdateOps(c client.Client, uuid string, want translate.NAT) ([]ovsdb.Operation, error) {
	m, err := natModel(c, want, uuid)
	if err != nil {
		return nil, err
	}
	switch w := m.(type) {
	case *nbdbext.NAT:
		return c.Where(&nbdbext.NAT{UUID: uuid}).Update(w, &w.Type, &w.ExternalIP, &w.LogicalIP, &w.Match, &w.Priority, &w.ExternalPortRange, &w.ExternalIDs)
	case *nbdb.NAT:
		return c.Where(&nbdb.NAT{UUID: uuid}).Update(w, &w.Type, &w.ExternalIP, &w.LogicalIP, &w.ExternalPortRange, &w.ExternalIDs)
	}
	return nil, fmt.Errorf("unexpected NAT model %T", m)
}

// natDeleteOps deletes a NAT row by UUID.
func natDeleteOps(c client.Client, uuid string) ([]ovsdb.Operation, error) {
	if natWithMatch(c) {
		return c.Where(&nbdbext.NAT{UUID: uuid}).Delete()
	}
	return c.Where(&nbdb.NAT{UUID: uuid}).Delete()
}

// natDiffers reports whether an owned row differs from the wanted one in a
// column ovn-egress writes.
func natDiffers(cur natRow, w translate.NAT) bool {
	return cur.Type != w.Type || cur.ExternalIP != w.ExternalIP || cur.LogicalIP != w.LogicalIP || cur.Match != w.Match ||
		cur.Priority != w.Priority || cur.ExternalPortRange != w.ExternalPortRange || !maps.Equal(cur.ExternalIDs, w.ExternalIDs)
}
