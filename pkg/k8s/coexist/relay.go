package coexist

import "sync"

// Relay carries a zone translation's finding to the node agent beside it,
// in the same process: while another install of ovn-egress holds the
// zone's NB (Conflict.ForeignInstance), that install's agent runs on this
// node too, and the two agents would undo each other's kernel objects (one
// nftables table, one ip rule protocol). Subscribe it to the zone's
// Detector with OnChange(relay.Set).
type Relay struct {
	mu      sync.Mutex
	foreign string
	subs    []func()
}

// Set takes the zone's conflict; subscribers hear of a change of its
// foreign install.
func (r *Relay) Set(c Conflict) {
	r.mu.Lock()
	changed := r.foreign != c.ForeignInstance
	r.foreign = c.ForeignInstance
	subs := r.subs
	r.mu.Unlock()
	if changed {
		for _, f := range subs {
			f()
		}
	}
}

// ForeignInstance is the other install holding the zone's NB ("" for none).
func (r *Relay) ForeignInstance() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.foreign
}

// Subscribe calls f after every change of ForeignInstance.
func (r *Relay) Subscribe(f func()) {
	r.mu.Lock()
	r.subs = append(r.subs, f)
	r.mu.Unlock()
}
