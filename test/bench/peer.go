package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// rawChange renders one change of a row shape as transact params (after the
// database name) and says when the SB shows it; done sees the reply.
type rawChange func(ch change) (params []any, sbShows func() bool, done func([]ovsdb.OperationResult))

// churnRaw applies changes to env one raw transaction each (no controller,
// no cache), timed to the NB reply and until the SB shows the change; OVN
// settles between changes.
func (b *bench) churnRaw(ctx context.Context, env *ovnEnv, chs []change, render rawChange) (churnResult, error) {
	var res churnResult
	c, err := rawClient(ctx, env.o.NBAddress())
	if err != nil {
		return res, err
	}
	defer c.Close()
	env.settle()
	if err := env.clearEngine(); err != nil {
		return res, err
	}
	mark := env.nbLog().mark()
	for _, ch := range chs {
		params, shows, done := render(ch)
		ops, err := encodeOps(append([]any{"OVN_Northbound"}, params...))
		if err != nil {
			return res, err
		}
		cctx, cancel := within(ctx, 60*time.Second)
		start := time.Now()
		reply, err := c.Transact(cctx, ops...)
		commit := time.Since(start)
		if err == nil {
			err = checkOps(reply, ops)
		}
		var at time.Time
		if err == nil {
			at, err = env.sb.wait(cctx, ch.kind+" in SB", shows)
		}
		cancel()
		if err != nil {
			return res, fmt.Errorf("%s: %w", ch.kind, err)
		}
		if done != nil {
			done(reply)
		}
		res.nb = append(res.nb, commit)
		res.sb = append(res.sb, at.Sub(start))
		env.settle()
	}
	return res, b.churnCounters(env, mark, &res)
}

// peerChange is how ovn-kubernetes writes a change with one policy per
// endpoint: add = insert a policy; move = delete the old policy and insert
// the new one; remove = delete the policy.
func (b *bench) peerChange(env *ovnEnv) rawChange {
	rows := map[netip.Addr]string{} // endpoint → its policy's UUID
	return func(ch change) ([]any, func() bool, func([]ovsdb.OperationResult)) {
		var params []any
		var conds []func() bool
		var done func([]ovsdb.OperationResult)
		if ch.del.IsValid() {
			ref := []any{"uuid", rows[ch.del]}
			params = append(params, attachPolicies("delete", []any{ref}),
				map[string]any{"op": "delete", "table": "Logical_Router_Policy", "where": []any{[]any{"_uuid", "==", ref}}})
			conds = append(conds, env.sb.hasFlow(stagePolicy, ch.del.String(), false))
		}
		if ch.add.IsValid() {
			at := len(params)
			nh := b.w.mgmtIP(b.w.host(ch.svc)).String()
			params = append(params, peerPolicy("np", ch.add.String(), nh, b.w.key(ch.svc)),
				attachPolicies("insert", []any{[]any{"named-uuid", "np"}}))
			conds = append(conds, env.sb.hasFlow(stagePolicy, ch.add.String(), true))
			done = func(reply []ovsdb.OperationResult) { rows[ch.add] = reply[at].UUID.GoUUID }
		}
		return params, all(conds), done
	}
}

// ourChange is the same change in ovn-egress's shape: one mutation of the
// host's address set.
func (b *bench) ourChange(env *ovnEnv, sets map[string]string) rawChange {
	return func(ch change) ([]any, func() bool, func([]ovsdb.OperationResult)) {
		set := sets[b.w.nodeName(b.w.host(ch.svc))]
		var muts []any
		var conds []func() bool
		if ch.del.IsValid() {
			muts = append(muts, []any{"addresses", "delete", []any{"set", []any{ch.del.String()}}})
			conds = append(conds, inSet(env.sb.sets, set, ch.del.String(), false))
		}
		if ch.add.IsValid() {
			muts = append(muts, []any{"addresses", "insert", []any{"set", []any{ch.add.String()}}})
			conds = append(conds, inSet(env.sb.sets, set, ch.add.String(), true))
		}
		op := map[string]any{"op": "mutate", "table": "Address_Set", "where": []any{[]any{"name", "==", set}}, "mutations": muts}
		return []any{op}, all(conds), nil
	}
}
