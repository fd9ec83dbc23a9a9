package nbsync

import (
	"sync"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// dirt records, per key, why it is dirty, for gather: a key that only
// EgressServices moving on or off its host dirtied since its last sync
// lists those services alone (translate.Input.Unlisted), so a drain costs
// the services that moved and not every service of every host they moved
// onto. Any other reason — a Service, EndpointSlice, Node, report or NB
// event, a resync, a failed sync — walks the key in full, and so does a
// key the worker takes without a record.
//
// Every enqueue records first and adds the key after (Controller.add, on):
// a record the worker takes belongs to a key that is, or soon will be, in
// its queue.
type dirt struct {
	mu sync.Mutex
	// keys holds, per dirty key, the EgressServices that moved on or off
	// it; nil: walk it in full.
	keys map[translate.Key]map[string]bool
}

func newDirt() *dirt { return &dirt{keys: map[translate.Key]map[string]bool{}} }

// full marks k to be walked in full.
func (d *dirt) full(k translate.Key) {
	d.mu.Lock()
	d.keys[k] = nil
	d.mu.Unlock()
}

// moved records that EgressService svc moved on or off k's host, unless
// k is to be walked in full already.
func (d *dirt) moved(k translate.Key, svc string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.keys[k]
	switch {
	case !k.IsNode():
		d.keys[k] = nil
	case ok && m == nil:
	case !ok:
		d.keys[k] = map[string]bool{svc: true}
	default:
		m[svc] = true
	}
}

// take returns the moved services of the keys of a batch that need no full
// walk, and forgets the records of every key of the batch.
func (d *dirt) take(keys []translate.Key) map[translate.Key]map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out map[translate.Key]map[string]bool
	for _, k := range keys {
		m, ok := d.keys[k]
		delete(d.keys, k)
		if ok && m != nil {
			if out == nil {
				out = map[translate.Key]map[string]bool{}
			}
			out[k] = m
		}
	}
	return out
}
