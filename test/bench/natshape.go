package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// runNATShape (issue 14): what each candidate shape of the gateway path's
// NAT rows costs the OVN this run uses, measured the way nb-shapes.md
// measured 23.03: the whole world in one raw transaction → SB complete, the
// SNAT flows it adds, then endpoint changes one raw transaction each, with
// northd's recomputes. No controller takes part; the shapes are compared on
// the same OVN in the same run.
//
//   - per endpoint: one snat row per endpoint on the host's GR (logical_ip the
//     endpoint, external_ip the LB IP) — what --snat-backend=ovn writes;
//   - per service: one snat row per (service, family) whose NAT.match names an
//     address set of that service's endpoints (logical_ip the cluster subnet);
//     an endpoint change is then an Address_Set mutation, no NAT write. It
//     needs NAT.match (OVN ≥ 24.09); on an older NB it is reported as not
//     possible. (A match on the host's own set cannot work: the services of
//     one host have different LB IPs.)
func (b *bench) runNATShape(ctx context.Context, r *result) error {
	ctx, cancel := within(ctx, 40*time.Minute)
	defer cancel()
	hasMatch := b.w.natMatch
	r.Details["nb_has_nat_match"] = hasMatch
	shapes := []natShape{b.perEndpointNAT()}
	if hasMatch {
		shapes = append(shapes, b.perServiceNAT())
	} else {
		r.note("natshape: this NB has no NAT.match column (OVN < 24.09): only the per-endpoint shape is possible")
	}
	res := map[string]natShapeResult{}
	for _, s := range shapes {
		sr, err := b.measureNATShape(ctx, r, s)
		if err != nil {
			return wrap(s.name, err)
		}
		res[s.name] = sr
	}
	if hasMatch {
		pe, ps := res["per endpoint"], res["per service"]
		r.metric("natshape: converge, per endpoint / per service (raw write → SB complete)", ratio(pe.visible.Seconds(), ps.visible.Seconds()), "×")
		r.metric("natshape: change → SB p50, per endpoint / per service", ratio(pe.churn.sb.pct(0.5).Seconds(), ps.churn.sb.pct(0.5).Seconds()), "×")
	}
	return nil
}

// natShape is one way of writing the gateway path's SNAT: the whole world's
// rows, the SNAT flows they add, and how one endpoint change is written.
type natShape struct {
	name   string
	load   func() (ops []ovsdb.Operation, flows int, err error)
	change func(env *ovnEnv) rawChange
}

type natShapeResult struct {
	visible time.Duration
	churn   churnResult
}

func (b *bench) measureNATShape(ctx context.Context, r *result, s natShape) (natShapeResult, error) {
	var out natShapeResult
	p := "natshape " + s.name + ": "
	env, err := startOVN(ctx, b.w, false)
	if err != nil {
		return out, err
	}
	defer env.stop()
	ops, flows, err := s.load()
	if err != nil {
		return out, err
	}
	b.step("%sraw write of %d operations", p, len(ops))
	w, err := writeRaw(ctx, env, ops, env.sb.flowsAtLeast(stageSNAT, flows))
	if err != nil {
		return out, wrap("raw write", err)
	}
	out.visible = w.visible
	r.metric(p+"operations in the raw transaction", float64(w.ops), "operations")
	r.seconds(p+"raw transaction → NB reply", w.commit)
	r.seconds(p+"raw transaction → SB complete", w.visible)
	r.metric(p+"lr_out_snat flows added", float64(flows), "flows")
	r.Details[p+"daemon_rss_mib"] = w.rss
	chs := b.w.changes(b.opts.churn)
	b.step("%s%d endpoint changes, one raw transaction each", p, len(chs))
	out.churn, err = b.churnRaw(ctx, env, chs, s.change(env))
	if err != nil {
		return out, wrap("churn", err)
	}
	out.churn.report(r, p+"churn: ", len(chs))
	return out, nil
}

// detectNATMatch starts this run's OVN once and reads the NB schema: does
// NAT have match and priority (what the master's client detects)?
func (b *bench) detectNATMatch(ctx context.Context) (bool, error) {
	dir, err := os.MkdirTemp("", "oeb-")
	if err != nil {
		return false, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	o, err := testenv.StartOVN(dir, testenv.OVNOptions{}) // the schema is all it reads: no topology
	if err != nil {
		return false, fmt.Errorf("start OVN: %w", err)
	}
	defer o.Stop()
	c, err := rawClient(ctx, o.NBAddress())
	if err != nil {
		return false, err
	}
	defer c.Close()
	s := c.Schema()
	t := s.Table("NAT")
	return t != nil && t.Column("match") != nil && t.Column("priority") != nil, nil
}

// attachNATs references named NAT rows from a gateway router's nat column.
func attachNATs(gr, mutator string, refs []any) map[string]any {
	return map[string]any{"op": "mutate", "table": "Logical_Router",
		"where":     []any{[]any{"name", "==", gr}},
		"mutations": []any{[]any{"nat", mutator, []any{"set", refs}}}}
}

func snatRow(uuidName, logicalIP, externalIP string, extra map[string]any) map[string]any {
	row := map[string]any{"type": "snat", "logical_ip": logicalIP, "external_ip": externalIP,
		"external_ids": []any{"map", []any{[]any{"k8s.ovn.org/owner-controller", "bench"}}}}
	for k, v := range extra {
		row[k] = v
	}
	return map[string]any{"op": "insert", "table": "NAT", "uuid-name": uuidName, "row": row}
}

// perEndpointNAT: one snat row per endpoint on its host's GR.
func (b *bench) perEndpointNAT() natShape {
	w := b.w
	rows := map[netip.Addr]string{} // endpoint → its NAT row's UUID
	load := func() ([]ovsdb.Operation, int, error) {
		params := []any{"OVN_Northbound"}
		refs := map[string][]any{}
		n := 0
		for s := 0; s < w.size.Services; s++ {
			gr := translate.GatewayRouter(w.nodeName(w.host(s)))
			for j := 0; j < w.size.endpointsOf(s); j++ {
				ip, _ := w.endpoint(s, j)
				name := fmt.Sprintf("n%d", n)
				n++
				params = append(params, snatRow(name, ip.String(), w.lbIP(s).String(), nil))
				refs[gr] = append(refs[gr], []any{"named-uuid", name})
			}
		}
		for gr, rs := range refs {
			params = append(params, attachNATs(gr, "insert", rs))
		}
		ops, err := encodeOps(params)
		return ops, n, err
	}
	change := func(env *ovnEnv) rawChange {
		return func(ch change) ([]any, func() bool, func([]ovsdb.OperationResult)) {
			gr := translate.GatewayRouter(w.nodeName(w.host(ch.svc)))
			var params []any
			var conds []func() bool
			var done func([]ovsdb.OperationResult)
			if ch.del.IsValid() {
				ref := []any{"uuid", rows[ch.del]}
				params = append(params, attachNATs(gr, "delete", []any{ref}),
					map[string]any{"op": "delete", "table": "NAT", "where": []any{[]any{"_uuid", "==", ref}}})
				conds = append(conds, env.sb.hasFlow(stageSNAT, ch.del.String(), false))
			}
			if ch.add.IsValid() {
				at := len(params)
				params = append(params, snatRow("nn", ch.add.String(), w.lbIP(ch.svc).String(), nil),
					attachNATs(gr, "insert", []any{[]any{"named-uuid", "nn"}}))
				conds = append(conds, env.sb.hasFlow(stageSNAT, ch.add.String(), true))
				done = func(reply []ovsdb.OperationResult) { rows[ch.add] = reply[at].UUID.GoUUID }
			}
			return params, all(conds), done
		}
	}
	// The loaded rows' UUIDs are read back lazily: a change deletes only
	// rows it added itself (w.changes removes what it added).
	return natShape{name: "per endpoint", load: load, change: change}
}

// perServiceNAT: one snat row per service on its host's GR, its match on an
// address set of the service's endpoints.
func (b *bench) perServiceNAT() natShape {
	w := b.w
	set := func(s int) string { return fmt.Sprintf("bench_svc_%d", s) }
	subnet := w.topo.ClusterSubnets[0].String()
	load := func() ([]ovsdb.Operation, int, error) {
		params := []any{"OVN_Northbound"}
		refs := map[string][]any{}
		for s := 0; s < w.size.Services; s++ {
			gr := translate.GatewayRouter(w.nodeName(w.host(s)))
			var addrs []any
			for j := 0; j < w.size.endpointsOf(s); j++ {
				ip, _ := w.endpoint(s, j)
				addrs = append(addrs, ip.String())
			}
			params = append(params, map[string]any{"op": "insert", "table": "Address_Set",
				"row": map[string]any{"name": set(s), "addresses": []any{"set", addrs}}})
			name := fmt.Sprintf("n%d", s)
			params = append(params, snatRow(name, subnet, w.lbIP(s).String(),
				map[string]any{"match": "ip4.src == $" + set(s), "priority": 10}))
			refs[gr] = append(refs[gr], []any{"named-uuid", name})
		}
		for gr, rs := range refs {
			params = append(params, attachNATs(gr, "insert", rs))
		}
		ops, err := encodeOps(params)
		return ops, w.size.Services, err
	}
	change := func(env *ovnEnv) rawChange {
		return func(ch change) ([]any, func() bool, func([]ovsdb.OperationResult)) {
			var muts []any
			var conds []func() bool
			if ch.del.IsValid() {
				muts = append(muts, []any{"addresses", "delete", []any{"set", []any{ch.del.String()}}})
				conds = append(conds, inSet(env.sb.sets, set(ch.svc), ch.del.String(), false))
			}
			if ch.add.IsValid() {
				muts = append(muts, []any{"addresses", "insert", []any{"set", []any{ch.add.String()}}})
				conds = append(conds, inSet(env.sb.sets, set(ch.svc), ch.add.String(), true))
			}
			op := map[string]any{"op": "mutate", "table": "Address_Set", "where": []any{[]any{"name", "==", set(ch.svc)}}, "mutations": muts}
			return []any{op}, all(conds), nil
		}
	}
	return natShape{name: "per service", load: load, change: change}
}
