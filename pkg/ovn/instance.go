package ovn

import (
	"context"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
)

// InstanceKey is the key in NB_Global's external_ids naming the ovn-egress
// install that writes this NB. Two installs on one NB would each take the
// other's rows for their own (the rows carry no install): the first to
// claim the NB writes, any other stands back until the claim is released.
const InstanceKey = "ovn-egress.io/instance"

// InstanceOwner returns the install that claimed the NB ("" for none), from
// the cache.
func InstanceOwner(c client.Client) string {
	for _, m := range cachedRows(c, nbdb.NBGlobalTable) {
		if g, ok := m.(*nbdb.NBGlobal); ok {
			return g.ExternalIDs[InstanceKey]
		}
	}
	return ""
}

// ClaimInstance claims the NB for instance unless an install has already,
// and returns the owner. The claim is one transaction that inserts the key
// (an OVSDB map insert keeps a key already there) and reads the value back,
// so of two installs that claim at once exactly one wins, and each learns
// which. An NB without its NB_Global row yet (ovn-northd or `ovn-nbctl init`
// creates it) gets one holding the claim; an insert that loses to another
// writer's fails, and the caller tries again.
func ClaimInstance(ctx context.Context, c client.Client, instance string) (string, error) {
	if owner := InstanceOwner(c); owner != "" {
		return owner, nil
	}
	claim := ovsdb.OvsMap{GoMap: map[any]any{InstanceKey: instance}}
	var ops []ovsdb.Operation
	if uuid := nbGlobalUUID(c); uuid != "" {
		where := []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: uuid}}}
		ops = []ovsdb.Operation{
			{Op: ovsdb.OperationMutate, Table: nbdb.NBGlobalTable, Where: where,
				Mutations: []ovsdb.Mutation{{Column: "external_ids", Mutator: ovsdb.MutateOperationInsert, Value: claim}}},
			{Op: ovsdb.OperationSelect, Table: nbdb.NBGlobalTable, Where: where, Columns: []string{"external_ids"}},
		}
	} else {
		ops = []ovsdb.Operation{
			{Op: ovsdb.OperationInsert, Table: nbdb.NBGlobalTable, Row: ovsdb.Row{"external_ids": claim}},
			{Op: ovsdb.OperationSelect, Table: nbdb.NBGlobalTable, Where: []ovsdb.Condition{}, Columns: []string{"external_ids"}},
		}
	}
	res, err := c.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		return "", fmt.Errorf("claim the NB for ovn-egress instance %q: %w", instance, err)
	}
	if len(res) < 2 || len(res[1].Rows) != 1 {
		return "", fmt.Errorf("claim the NB for ovn-egress instance %q: NB_Global not read back as one row", instance)
	}
	m, ok := res[1].Rows[0]["external_ids"].(ovsdb.OvsMap)
	if !ok {
		return "", fmt.Errorf("claim the NB for ovn-egress instance %q: NB_Global.external_ids read back as %T", instance, res[1].Rows[0]["external_ids"])
	}
	owner, _ := m.GoMap[InstanceKey].(string)
	return owner, nil
}

// ReleaseInstance removes instance's claim of the NB (nothing when another
// install holds it: an OVSDB map delete by key and value).
func ReleaseInstance(ctx context.Context, c client.Client, instance string) error {
	uuid := nbGlobalUUID(c)
	if uuid == "" {
		return nil
	}
	ops := []ovsdb.Operation{{Op: ovsdb.OperationMutate, Table: nbdb.NBGlobalTable,
		Where:     []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: uuid}}},
		Mutations: []ovsdb.Mutation{{Column: "external_ids", Mutator: ovsdb.MutateOperationDelete, Value: ovsdb.OvsMap{GoMap: map[any]any{InstanceKey: instance}}}}}}
	res, err := c.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		return fmt.Errorf("release ovn-egress instance %q's claim of the NB: %w", instance, err)
	}
	return nil
}

func nbGlobalUUID(c client.Client) string {
	for _, m := range cachedRows(c, nbdb.NBGlobalTable) {
		if g, ok := m.(*nbdb.NBGlobal); ok {
			return g.UUID
		}
	}
	return ""
}
