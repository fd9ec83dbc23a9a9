package ovn

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/sirupsen/logrus"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/sbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// What northd made of ovn-egress's rows. A row northd cannot use — a
// reroute whose next hop no router port reaches, a NAT on a router with no
// gateway — gets no logical flow and only a line in ovn-northd's log: NB
// alone looks right while the traffic goes on as if the row were not
// there. northd names the NB row behind each logical flow in the flow's
// external_ids:stage-hint (the first 8 hex digits of the row's UUID).

// flowStages are the pipeline stages whose flows carry the hints of
// ovn-egress's rows: router policies, and NAT rows' SNAT.
var flowStages = []string{"lr_in_policy", "lr_out_snat"}

// NewSBClient connects to SB and monitors the external_ids of the logical
// flows of flowStages alone (a cluster's SB holds hundreds of thousands of
// flows; these stages hold few of them). The cache is complete when it
// returns.
func NewSBClient(ctx context.Context, cfg ClientConfig, log *logrus.Entry) (client.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout())
	defer cancel()
	m, err := sbdb.FullDatabaseModel()
	if err != nil {
		return nil, fmt.Errorf("sb model: %w", err)
	}
	c, err := dial(cctx, cfg, m, "SB", log, false)
	if err != nil {
		return nil, err
	}
	lf := &sbdb.LogicalFlow{}
	var conds []model.Condition
	for _, s := range flowStages {
		// monitor_cond: a row is monitored when it meets any condition.
		conds = append(conds, model.Condition{Field: &lf.ExternalIDs, Function: ovsdb.ConditionIncludes,
			Value: map[string]string{"stage-name": s}})
	}
	if _, err := c.Monitor(cctx, c.NewMonitor(client.WithConditionalTable(lf, conds, &lf.ExternalIDs))); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor SB: %w", err)
	}
	return c, nil
}

// Unflowed is one of ovn-egress's NB rows that no logical flow names.
type Unflowed struct {
	Table string `json:"table"` // Logical_Router_Policy or NAT
	ID    string `json:"id"`    // its k8s.ovn.org/id
	UUID  string `json:"uuid"`
	What  string `json:"what"`
}

func (u Unflowed) String() string {
	return fmt.Sprintf("noflow     %s %s: %s — northd made no logical flow of it (row %s; ovn-northd's log says why)",
		u.Table, u.ID, u.What, u.UUID)
}

// UnflowedRows returns the policies and NAT rows ovn-egress owns in nb under
// keys that no logical flow in sb names, sorted by table and id. Rows
// written just now may have no flows yet: a row is reported only when it
// still has none after settle (the SB monitor is live meanwhile).
func UnflowedRows(ctx context.Context, nb, sb client.Client, keys []translate.Key, settle time.Duration) ([]Unflowed, error) {
	rows, err := ownedFlowRows(ctx, nb, keys)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(settle)
	for {
		hinted := flowHints(sb)
		missing := slices.DeleteFunc(slices.Clone(rows), func(u Unflowed) bool { return hinted[hint(u.UUID)] })
		if len(missing) == 0 || !time.Now().Before(deadline) {
			return missing, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ownedFlowRows lists the owned policies and NAT rows of keys.
func ownedFlowRows(ctx context.Context, nb client.Client, keys []translate.Key) ([]Unflowed, error) {
	set := make(map[translate.Key]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	pols, err := ownedByKey(ctx, nb, nbdb.LogicalRouterPolicyTable, set, policyProbe, policyIDs, policyUUID)
	if err != nil {
		return nil, err
	}
	nats, err := ownedNATs(ctx, nb, set)
	if err != nil {
		return nil, err
	}
	var out []Unflowed
	for _, rs := range pols {
		for _, r := range rs {
			what := fmt.Sprintf("%d %s %s", r.Priority, r.Match, r.Action)
			if len(r.Nexthops) > 0 {
				what += " " + strings.Join(r.Nexthops, ",")
			}
			out = append(out, Unflowed{nbdb.LogicalRouterPolicyTable, r.ExternalIDs[translate.KeyID], r.UUID, what})
		}
	}
	for _, rs := range nats {
		for _, r := range rs {
			what := fmt.Sprintf("%s %s <- %s", r.Type, r.ExternalIP, r.LogicalIP)
			if r.Match != "" {
				what += fmt.Sprintf(" match %q", r.Match)
			}
			out = append(out, Unflowed{nbdb.NATTable, r.ExternalIDs[translate.KeyID], r.UUID, what})
		}
	}
	slices.SortFunc(out, func(a, b Unflowed) int {
		if c := strings.Compare(a.Table, b.Table); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, ctx.Err()
}

// flowHints returns the stage hints of the logical flows in sb's cache.
func flowHints(sb client.Client) map[string]bool {
	out := map[string]bool{}
	for _, m := range sb.Cache().Table(sbdb.LogicalFlowTable).Rows() {
		if lf, ok := m.(*sbdb.LogicalFlow); ok && lf.ExternalIDs["stage-hint"] != "" {
			out[lf.ExternalIDs["stage-hint"]] = true
		}
	}
	return out
}

// hint is the stage-hint northd writes for the NB row uuid.
func hint(uuid string) string {
	h, _, _ := strings.Cut(uuid, "-")
	return h
}

// SBAddresses derives the SB's endpoints from the NB's, as OVN names them:
// a unix socket's file ovnnb_db.sock (or nb.sock) becomes ovnsb_db.sock
// (sb.sock), and tcp or ssl port 6641 becomes 6642. It fails for an
// endpoint that follows neither convention.
func SBAddresses(nb []string) ([]string, error) {
	var out []string
	for _, a := range nb {
		scheme, rest, _ := strings.Cut(a, ":")
		switch scheme {
		case "unix":
			dir, file := "", rest
			if i := strings.LastIndex(rest, "/"); i >= 0 {
				dir, file = rest[:i+1], rest[i+1:]
			}
			if !strings.Contains(file, "nb") {
				return nil, fmt.Errorf("cannot derive the SB's socket from %s (no \"nb\" in its file name)", a)
			}
			out = append(out, "unix:"+dir+strings.Replace(file, "nb", "sb", 1))
		default:
			host, port, err := net.SplitHostPort(rest)
			if err != nil || port != "6641" {
				return nil, fmt.Errorf("cannot derive the SB's address from %s (not port 6641)", a)
			}
			out = append(out, scheme+":"+net.JoinHostPort(host, "6642"))
		}
	}
	return out, nil
}
