package main

import (
	"context"
	"fmt"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// nbWatch mirrors ovn-egress's NB tables through a monitor of its own:
// what the NB server has committed, as any client sees it.
type nbWatch struct {
	*mirror
	conn  *rpcConn
	sets  setIndex
	owned map[string]int // owned rows per table
	// nats counts owned NAT rows by logical IP and by the host they are for.
	nats map[string]map[string]int
}

func watchNB(ctx context.Context, addr string) (*nbWatch, error) {
	w := &nbWatch{mirror: newMirror(), sets: setIndex{}, owned: map[string]int{}, nats: map[string]map[string]int{}}
	w.hook = func(table string, old, cur map[string]any) {
		switch table {
		case "Address_Set":
			w.sets.update(old, cur)
		case "NAT":
			w.countNAT(old, -1)
			w.countNAT(cur, 1)
		}
		if isOwned(old) {
			w.owned[table]--
		}
		if isOwned(cur) {
			w.owned[table]++
		}
	}
	c, err := dialOVSDB(addr, w.notify)
	if err != nil {
		return nil, err
	}
	w.conn = c
	w.setColumns["Address_Set"] = map[string]bool{"addresses": true}
	err = w.monitorCond(ctx, c, "OVN_Northbound", "bench-nb-as", "Address_Set", []string{"name", "addresses", "external_ids"}, nil)
	if err == nil {
		err = w.monitor(ctx, c, "OVN_Northbound", "bench-nb", map[string][]string{
			"Logical_Router_Policy": {"match", "nexthops", "external_ids"},
			"NAT":                   {"logical_ip", "external_ip", "external_ids"},
		})
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("monitor NB: %w", err)
	}
	return w, nil
}

func (w *nbWatch) countNAT(row map[string]any, delta int) {
	if !isOwned(row) {
		return
	}
	ip, _ := row["logical_ip"].(string)
	host := ovsdbMap(row["external_ids"])[translate.KeyName]
	if w.nats[ip] == nil {
		w.nats[ip] = map[string]int{}
	}
	w.nats[ip][host] += delta
	if w.nats[ip][host] == 0 {
		delete(w.nats[ip], host)
	}
}

// natOn reports whether an owned NAT row for ip exists for host (or not).
func (w *nbWatch) natOn(ip, host string, want bool) func() bool {
	return func() bool { return (w.nats[ip][host] > 0) == want }
}

func isOwned(row map[string]any) bool {
	return row != nil && ovsdbMap(row["external_ids"])[translate.KeyOwnerController] == translate.OwnerController
}

// wantIndex is a desired state in the shape the watches compare against.
type wantIndex struct {
	sets     map[string][]string
	policies int
	nats     int
}

func indexDesired(d *translate.Desired) wantIndex {
	w := wantIndex{sets: map[string][]string{}}
	for _, r := range d.Rows {
		for _, as := range r.AddressSets {
			w.sets[as.Name] = as.Addresses
		}
		w.policies += len(r.Policies)
		w.nats += len(r.NATs)
	}
	return w
}

// setsMatch reports whether every wanted set exists with exactly its
// addresses (called under the mirror's lock).
func setsMatch(have setIndex, want wantIndex) bool {
	for name, addrs := range want.sets {
		h, ok := have[name]
		if !ok || len(h) != len(addrs) {
			return false
		}
		for _, a := range addrs {
			if !h[a] {
				return false
			}
		}
	}
	return true
}

// complete reports whether NB holds exactly the wanted owned rows.
func (w *nbWatch) complete(want wantIndex) func() bool {
	return func() bool {
		return w.owned["Address_Set"] == len(want.sets) && w.owned["Logical_Router_Policy"] == want.policies &&
			w.owned["NAT"] == want.nats && setsMatch(w.sets, want)
	}
}

// sbWatch mirrors SB Address_Set (all of it) and the logical flows of the
// stages the egress rows produce flows in, conditionally monitored.
type sbWatch struct {
	*mirror
	conn  *rpcConn
	sets  setIndex
	flows *stageIndex
	base  map[string]int // flows per stage before the measurement
}

// Stages whose flows the bench watches: reroute policies and SNAT.
const (
	stagePolicy = "lr_in_policy"
	stageSNAT   = "lr_out_snat"
)

func watchSB(ctx context.Context, addr string) (*sbWatch, error) {
	w := &sbWatch{mirror: newMirror(), sets: setIndex{}, flows: newStageIndex()}
	w.hook = func(table string, old, cur map[string]any) {
		switch table {
		case "Address_Set":
			w.sets.update(old, cur)
		case "Logical_Flow":
			if old != nil {
				w.flows.add(old, -1)
			}
			if cur != nil {
				w.flows.add(cur, 1)
			}
		}
	}
	c, err := dialOVSDB(addr, w.notify)
	if err != nil {
		return nil, err
	}
	w.conn = c
	w.setColumns["Address_Set"] = map[string]bool{"addresses": true}
	if err := w.monitorCond(ctx, c, "OVN_Southbound", "bench-sb-as", "Address_Set", []string{"name", "addresses"}, nil); err != nil {
		c.close()
		return nil, fmt.Errorf("monitor SB address sets: %w", err)
	}
	var where []any
	for _, st := range []string{stagePolicy, stageSNAT} {
		where = append(where, []any{"external_ids", "includes", []any{"map", []any{[]any{"stage-name", st}}}})
	}
	if err := w.monitorCond(ctx, c, "OVN_Southbound", "bench-sb-lf", "Logical_Flow", []string{"match", "external_ids"}, where); err != nil {
		c.close()
		return nil, fmt.Errorf("monitor SB logical flows: %w", err)
	}
	w.markBase()
	return w, nil
}

// markBase records the flow counts now, before rows are added.
func (w *sbWatch) markBase() {
	w.with(func() {
		w.base = map[string]int{}
		for st, n := range w.flows.count {
			w.base[st] = n
		}
	})
}

// complete reports whether the SB reflects the wanted rows: every address
// set copied with its addresses, one policy flow per policy and one SNAT
// flow per NAT row beyond the base.
func (w *sbWatch) complete(want wantIndex) func() bool {
	return func() bool {
		return w.flows.count[stagePolicy] >= w.base[stagePolicy]+want.policies &&
			w.flows.count[stageSNAT] >= w.base[stageSNAT]+want.nats && setsMatch(w.sets, want)
	}
}

// flowsAtLeast reports whether a stage has n flows beyond the base.
func (w *sbWatch) flowsAtLeast(stage string, n int) func() bool {
	return func() bool { return w.flows.count[stage] >= w.base[stage]+n }
}

// hasFlow reports whether a stage has (or lacks) a flow matching src.
func (w *sbWatch) hasFlow(stage, src string, want bool) func() bool {
	return func() bool { return (w.flows.bySrc[stage][src] > 0) == want }
}

// inSet reports whether a set holds (or lacks) addr; used for NB and SB.
func inSet(sets setIndex, name, addr string, want bool) func() bool {
	return func() bool { return sets[name][addr] == want }
}

func (w *nbWatch) close() { w.conn.close() }
func (w *sbWatch) close() { w.conn.close() }
