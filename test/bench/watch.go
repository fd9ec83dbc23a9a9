package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// mirror keeps a copy of monitored OVSDB tables, fed by "update"
// (monitor) and "update2" (monitor_cond) notifications, and wakes waiters
// whose condition became true with the arrival time of the notification
// that made it so. Conditions run under the mirror's lock.
type mirror struct {
	mu      sync.Mutex
	rows    map[string]map[string]map[string]any // table → uuid → column → value
	updates int                                  // notifications applied
	waiters []*waiter
	// hooks keep derived indexes; old is nil on insert, cur nil on delete.
	hook func(table string, old, cur map[string]any)
	// setColumns are, per table, the set columns a monitor_cond "modify"
	// gives as a diff (the elements to toggle); they are kept as []string.
	setColumns map[string]map[string]bool
}

type waiter struct {
	cond func() bool
	ch   chan time.Time
}

func newMirror() *mirror {
	return &mirror{rows: map[string]map[string]map[string]any{}, setColumns: map[string]map[string]bool{}}
}

func (m *mirror) table(t string) map[string]map[string]any {
	rows := m.rows[t]
	if rows == nil {
		rows = map[string]map[string]any{}
		m.rows[t] = rows
	}
	return rows
}

// notify applies a notification (the rpcConn callback).
func (m *mirror) notify(method string, params json.RawMessage, at time.Time) {
	var p []json.RawMessage
	if json.Unmarshal(params, &p) != nil || len(p) < 2 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch method {
	case "update":
		m.applyUpdate(p[1])
	case "update2":
		m.applyUpdate2(p[1])
	default:
		return
	}
	m.updates++
	m.wake(at)
}

func (m *mirror) applyUpdate(raw json.RawMessage) {
	var tu map[string]map[string]struct {
		Old map[string]any `json:"old"`
		New map[string]any `json:"new"`
	}
	if json.Unmarshal(raw, &tu) != nil {
		return
	}
	for t, rows := range tu {
		tab := m.table(t)
		for uuid, ru := range rows {
			old := tab[uuid]
			if ru.New == nil {
				delete(tab, uuid)
				m.fire(t, old, nil)
				continue
			}
			cur := make(map[string]any, len(ru.New))
			for k, v := range old {
				cur[k] = v
			}
			for k, v := range ru.New {
				cur[k] = v
			}
			tab[uuid] = cur
			m.fire(t, old, cur)
		}
	}
}

// applyUpdate2 handles monitor_cond's row diffs: initial, insert and delete
// fully; modify replaces the atomic columns it names and toggles the
// elements it names in the table's set columns (setColumns). Other columns
// are read at insert only. A set column's diff costs what changed: a big
// address set is not decoded again at every mutation, which kept the
// bench's own observers busier than the master during a failover.
func (m *mirror) applyUpdate2(raw json.RawMessage) {
	var tu map[string]map[string]map[string]map[string]any
	if json.Unmarshal(raw, &tu) != nil {
		return
	}
	for t, rows := range tu {
		tab := m.table(t)
		for uuid, ru := range rows {
			old := tab[uuid]
			switch {
			case ru["initial"] != nil:
				tab[uuid] = ru["initial"]
				m.fire(t, old, ru["initial"])
			case ru["insert"] != nil:
				tab[uuid] = ru["insert"]
				m.fire(t, old, ru["insert"])
			case ru["modify"] != nil:
				cur := make(map[string]any, len(old))
				for k, v := range old {
					cur[k] = v
				}
				for k, v := range ru["modify"] {
					if m.setColumns[t][k] {
						cur[k] = toggled(ovsdbSet(old[k]), ovsdbSet(v))
					} else if _, ok := v.(string); ok {
						cur[k] = v
					}
				}
				tab[uuid] = cur
				m.fire(t, old, cur)
			default:
				if _, ok := ru["delete"]; ok {
					delete(tab, uuid)
					m.fire(t, old, nil)
				}
			}
		}
	}
}

// toggled is have with every element of diff added if absent and removed
// if present (OVSDB's set diff), in no particular order.
func toggled(have, diff []string) []string {
	flip := make(map[string]bool, len(diff))
	for _, d := range diff {
		flip[d] = !flip[d]
	}
	out := make([]string, 0, len(have)+len(diff))
	for _, h := range have {
		if flip[h] {
			delete(flip, h) // present: removed
			continue
		}
		out = append(out, h)
	}
	for d, add := range flip {
		if add {
			out = append(out, d)
		}
	}
	return out
}

func (m *mirror) fire(t string, old, cur map[string]any) {
	if m.hook != nil && (old != nil || cur != nil) {
		m.hook(t, old, cur)
	}
}

func (m *mirror) wake(at time.Time) {
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.cond() {
			w.ch <- at
			continue
		}
		kept = append(kept, w)
	}
	m.waiters = kept
}

// wait returns when cond holds: at once (time.Now) if it already does,
// otherwise with the arrival time of the notification that made it true.
func (m *mirror) wait(ctx context.Context, what string, cond func() bool) (time.Time, error) {
	m.mu.Lock()
	if cond() {
		m.mu.Unlock()
		return time.Now(), nil
	}
	w := &waiter{cond: cond, ch: make(chan time.Time, 1)}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()
	select {
	case at := <-w.ch:
		return at, nil
	case <-ctx.Done():
		m.mu.Lock()
		for i, x := range m.waiters {
			if x == w {
				m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
				break
			}
		}
		m.mu.Unlock()
		select {
		case at := <-w.ch:
			return at, nil
		default:
		}
		return time.Time{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
}

// with runs f under the mirror's lock (for reads outside a wait).
func (m *mirror) with(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

// monitor starts a plain monitor of columns per table and applies the
// initial contents.
func (m *mirror) monitor(ctx context.Context, c *rpcConn, db, id string, columns map[string][]string) error {
	req := map[string]any{}
	for t, cols := range columns {
		req[t] = map[string]any{"columns": cols}
	}
	res, err := c.call(ctx, "monitor", []any{db, id, req})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyUpdate(res)
	return nil
}

// monitorCond starts a conditional monitor of one table: the rows that
// match any of the conditions (ovsdb-server ORs a monitor's clauses), every
// row without conditions. Modifications arrive as diffs (update2).
func (m *mirror) monitorCond(ctx context.Context, c *rpcConn, db, id, table string, columns []string, where []any) error {
	req := []map[string]any{{"columns": columns}}
	if where != nil {
		req[0]["where"] = where
	}
	res, err := c.call(ctx, "monitor_cond", []any{db, id, map[string]any{table: req}})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyUpdate2(res)
	return nil
}

// srcRE finds the source a reroute or SNAT flow matches on.
var srcRE = regexp.MustCompile(`ip4\.src == (\$?[0-9A-Za-z_.]+)`)

// stageIndex counts SB logical flows per stage and, per stage, the flows
// that match on each source ("ip4.src == X").
type stageIndex struct {
	count map[string]int
	bySrc map[string]map[string]int
}

func newStageIndex() *stageIndex {
	return &stageIndex{count: map[string]int{}, bySrc: map[string]map[string]int{}}
}

func (s *stageIndex) add(row map[string]any, delta int) {
	stage := ovsdbMap(row["external_ids"])["stage-name"]
	s.count[stage] += delta
	match, _ := row["match"].(string)
	if sm := srcRE.FindStringSubmatch(match); sm != nil {
		if s.bySrc[stage] == nil {
			s.bySrc[stage] = map[string]int{}
		}
		s.bySrc[stage][sm[1]] += delta
	}
}

// setIndex maps address-set names to their addresses.
type setIndex map[string]map[string]bool

func (s setIndex) update(old, cur map[string]any) {
	if old != nil {
		if name, _ := old["name"].(string); name != "" {
			delete(s, name)
		}
	}
	if cur != nil {
		name, _ := cur["name"].(string)
		addrs := map[string]bool{}
		for _, a := range ovsdbSet(cur["addresses"]) {
			addrs[a] = true
		}
		s[name] = addrs
	}
}
