package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// rawClient is a libovsdb client with no monitor and no cache: a
// transaction through it costs what the NB server costs, the limit any
// controller is measured against.
func rawClient(ctx context.Context, addr string) (client.Client, error) {
	m, err := nbdb.FullDatabaseModel()
	if err != nil {
		return nil, fmt.Errorf("nb model: %w", err)
	}
	discard := logr.Discard()
	c, err := client.NewOVSDBClient(m, client.WithEndpoint(addr), client.WithLogger(&discard))
	if err != nil {
		return nil, fmt.Errorf("nb client: %w", err)
	}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	return c, nil
}

// opsFromParams decodes rendered transact params (["OVN_Northbound", op, ...]).
func opsFromParams(params []byte) ([]ovsdb.Operation, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(params, &raw); err != nil {
		return nil, fmt.Errorf("decode transaction: %w", err)
	}
	ops := make([]ovsdb.Operation, 0, len(raw))
	for _, r := range raw[1:] {
		var op ovsdb.Operation
		if err := json.Unmarshal(r, &op); err != nil {
			return nil, fmt.Errorf("decode operation: %w", err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// transactOps sends ops in one transaction and checks every result.
func transactOps(ctx context.Context, c client.Client, ops []ovsdb.Operation) error {
	res, err := c.Transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("transact %d operations: %w", len(ops), err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("transact %d operations: %w", len(ops), err)
	}
	return nil
}

// rawWrite is one bulk write by the raw client on a fresh NB: how long the
// NB server took to commit it, and when northd had it in the SB.
type rawWrite struct {
	ops     int
	commit  time.Duration // transaction sent → reply
	seenNB  time.Duration // transaction sent → a client monitoring NB has every row (0: not watched)
	visible time.Duration // transaction sent → SB reflects every row
	rss     map[string]float64
}

// writeRaw writes ops through a raw client on env and waits until sbDone.
func writeRaw(ctx context.Context, env *ovnEnv, ops []ovsdb.Operation, sbDone func() bool) (rawWrite, error) {
	return writeRawWatched(ctx, env, ops, nil, sbDone)
}

// writeRawWatched is writeRaw that also times, when nbDone is set, until
// env's NB monitor meets it — as the master's converge is timed.
func writeRawWatched(ctx context.Context, env *ovnEnv, ops []ovsdb.Operation, nbDone, sbDone func() bool) (rawWrite, error) {
	w := rawWrite{ops: len(ops)}
	c, err := rawClient(ctx, env.o.NBAddress())
	if err != nil {
		return w, err
	}
	defer c.Close()
	env.sb.markBase()
	start := time.Now()
	if err := transactOps(ctx, c, ops); err != nil {
		return w, err
	}
	w.commit = time.Since(start)
	if nbDone != nil {
		at, err := env.nb.wait(ctx, "NB monitor to have the raw write", nbDone)
		if err != nil {
			return w, err
		}
		w.seenNB = at.Sub(start)
	}
	at, err := env.sb.wait(ctx, "SB to reflect the raw write", sbDone)
	if err != nil {
		return w, err
	}
	w.visible = at.Sub(start)
	env.settle()
	w.rss = env.daemonRSS()
	return w, nil
}

// ourOps are the desired rows as one transaction (translate.OVSDBTransact).
func ourOps(d *translate.Desired) ([]ovsdb.Operation, error) {
	params, err := translate.OVSDBTransact(d)
	if err != nil {
		return nil, fmt.Errorf("render transaction: %w", err)
	}
	return opsFromParams(params)
}

// peerPriority is the priority ovn-kubernetes gives its EgressService
// reroute policies.
const peerPriority = 101

// peerPolicy is the row ovn-kubernetes writes for one endpoint: a reroute
// policy matching the endpoint's address, to its host's management port.
func peerPolicy(uuidName, ip, nexthop, owner string) map[string]any {
	return map[string]any{"op": "insert", "table": "Logical_Router_Policy", "uuid-name": uuidName,
		"row": map[string]any{"priority": peerPriority, "match": "ip4.src == " + ip, "action": "reroute",
			"nexthops":     []any{"set", []any{nexthop}},
			"external_ids": []any{"map", []any{[]any{"k8s.ovn.org/owner", owner}}}}}
}

// attachPolicies references named rows from ovn_cluster_router.policies.
func attachPolicies(mutator string, refs []any) map[string]any {
	return map[string]any{"op": "mutate", "table": "Logical_Router",
		"where":     []any{[]any{"name", "==", translate.ClusterRouter}},
		"mutations": []any{[]any{"policies", mutator, []any{"set", refs}}}}
}

// peerOps are the peer shape of the whole world in one transaction: one
// policy per endpoint, all attached to ovn_cluster_router.
func (w *world) peerOps() ([]ovsdb.Operation, error) {
	params := []any{"OVN_Northbound"}
	var refs []any
	for s := 0; s < w.size.Services; s++ {
		nh := w.mgmtIP(w.host(s)).String()
		for j := 0; j < w.size.endpointsOf(s); j++ {
			ip, _ := w.endpoint(s, j)
			name := fmt.Sprintf("p%d", len(refs))
			params = append(params, peerPolicy(name, ip.String(), nh, w.key(s)))
			refs = append(refs, []any{"named-uuid", name})
		}
	}
	params = append(params, attachPolicies("insert", refs))
	return encodeOps(params)
}

func encodeOps(params []any) ([]ovsdb.Operation, error) {
	b, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode operations: %w", err)
	}
	return opsFromParams(b)
}

// checkOps checks every operation's result.
func checkOps(res []ovsdb.OperationResult, ops []ovsdb.Operation) error {
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return fmt.Errorf("transact %d operations: %w", len(ops), err)
	}
	return nil
}
