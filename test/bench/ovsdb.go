package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// rpcConn is the bench's own minimal OVSDB JSON-RPC connection (RFC 7047):
// requests with replies, echo answered, and update notifications handed to
// a callback with the time they arrived. The bench watches NB and SB
// through it, without a libovsdb cache in the way of the timing.
type rpcConn struct {
	conn net.Conn

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	pending map[uint64]chan rpcMsg
	next    uint64
	err     error
	done    chan struct{}

	// notify receives every notification ("update", "update2"), in order,
	// on the reading goroutine.
	notify func(method string, params json.RawMessage, at time.Time)
}

type rpcMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

// dialOVSDB connects to unix:PATH or tcp:HOST:PORT.
func dialOVSDB(addr string, notify func(string, json.RawMessage, time.Time)) (*rpcConn, error) {
	network, where, ok := strings.Cut(addr, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return nil, fmt.Errorf("unsupported OVSDB address %q", addr)
	}
	c, err := net.DialTimeout(network, where, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	r := &rpcConn{conn: c, pending: map[uint64]chan rpcMsg{}, done: make(chan struct{}), notify: notify}
	go r.read()
	return r, nil
}

func (r *rpcConn) read() {
	dec := json.NewDecoder(bufio.NewReaderSize(r.conn, 1<<20))
	var err error
	for {
		var m rpcMsg
		if err = dec.Decode(&m); err != nil {
			break
		}
		at := time.Now()
		switch {
		case m.Method == "echo":
			err = r.write(map[string]any{"id": m.ID, "result": m.Params, "error": nil})
		case m.Method != "":
			if r.notify != nil {
				r.notify(m.Method, m.Params, at)
			}
		default:
			var id uint64
			if json.Unmarshal(m.ID, &id) == nil {
				r.mu.Lock()
				ch := r.pending[id]
				delete(r.pending, id)
				r.mu.Unlock()
				if ch != nil {
					ch <- m
				}
			}
		}
		if err != nil {
			break
		}
	}
	r.mu.Lock()
	r.err = fmt.Errorf("ovsdb connection closed: %w", err)
	for id, ch := range r.pending {
		close(ch)
		delete(r.pending, id)
	}
	r.mu.Unlock()
	close(r.done)
}

func (r *rpcConn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if _, err := r.conn.Write(b); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	return nil
}

// call sends a request and waits for its reply.
func (r *rpcConn) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	ch := make(chan rpcMsg, 1)
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return nil, r.err
	}
	r.next++
	id := r.next
	r.pending[id] = ch
	r.mu.Unlock()
	if err := r.write(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	case m, ok := <-ch:
		if !ok {
			r.mu.Lock()
			defer r.mu.Unlock()
			return nil, r.err
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return nil, fmt.Errorf("%s: %s", method, m.Error)
		}
		return m.Result, nil
	}
}

func (r *rpcConn) close() {
	r.conn.Close()
	<-r.done
}

// ovsdbSet and ovsdbMap decode OVSDB's JSON notation of sets and maps
// (["set", [...]], a bare atom, ["map", [[k, v], ...]]) into strings.
func ovsdbSet(v any) []string {
	switch x := v.(type) {
	case []string: // a set column the mirror keeps decoded
		return x
	case string:
		return []string{x}
	case []any:
		if len(x) == 2 && x[0] == "set" {
			items, _ := x[1].([]any)
			out := make([]string, 0, len(items))
			for _, it := range items {
				out = append(out, fmt.Sprint(atom(it)))
			}
			return out
		}
		if len(x) == 2 && x[0] == "uuid" {
			return []string{fmt.Sprint(x[1])}
		}
	}
	return nil
}

func atom(v any) any {
	if x, ok := v.([]any); ok && len(x) == 2 && (x[0] == "uuid" || x[0] == "named-uuid") {
		return x[1]
	}
	return v
}

func ovsdbMap(v any) map[string]string {
	x, ok := v.([]any)
	if !ok || len(x) != 2 || x[0] != "map" {
		return nil
	}
	pairs, _ := x[1].([]any)
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		kv, ok := p.([]any)
		if ok && len(kv) == 2 {
			out[fmt.Sprint(atom(kv[0]))] = fmt.Sprint(atom(kv[1]))
		}
	}
	return out
}
