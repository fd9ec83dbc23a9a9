package nbsync

import (
	"hash/maphash"
	"slices"
	"sync"

	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// wantedSets remembers, for every owned Address_Set of the keys synced so
// far, a digest of the row the worker last wanted in NB (its name and its
// addresses, in any order). The NB handler asks it whether a row that
// changed is as wanted: the echo of the worker's own write — or anybody's
// change that leaves the row as wanted — needs no sync; anything else is
// drift, and its key is synced again. Without it every write dirtied its
// keys once more, and during a drain, when a write touches most hosts,
// every sync translated every host again.
//
// The worker records before it writes (the echo can arrive before the
// transaction's reply). A sync that fails leaves its wish recorded: a row
// matching it is as wanted, and the failed keys are requeued anyway.
//
// libovsdb hands cache events to the handler from a goroutine of its own,
// so the echo of one write can be handled after the next sync of the same
// key recorded a newer wish. The few wishes before the newest are therefore
// kept until an echo shows that NB has passed them: NB events arrive in
// commit order, so a row matching one wish means the older ones' echoes
// are behind.
// Other owned rows are not remembered, and every change to them is synced,
// as before: policies and routes change when a host gains its first service
// or loses its last; NAT rows (gateway backend) change per endpoint, but
// their writes are already batched by the NAT batch window.
type wantedSets struct {
	mu    sync.Mutex
	seed  maphash.Seed
	sets  map[string]wantedSet       // by k8s.ovn.org/id
	byKey map[translate.Key][]string // the ids recorded per key
}

type wantedSet struct {
	digest setDigest
	// older are the wishes recorded before digest whose echo may still be
	// on its way (oldest first, at most maxOlderWishes).
	older []setDigest
	// first and digest.n identify the address slice the digest was
	// computed from: a set translation did not render again is the same
	// slice, and its digest is not computed again (holding first keeps it
	// unique).
	first *string
}

type setDigest struct {
	name string
	n    int
	sum  uint64
}

// maxOlderWishes bounds the wishes kept per set besides the newest: a key
// synced again and again while its echoes wait behind (NB down, a slow
// handler) forgets the oldest, and their late echoes are synced once more.
const maxOlderWishes = 3

func newWantedSets() *wantedSets {
	return &wantedSets{seed: maphash.MakeSeed(), sets: map[string]wantedSet{}, byKey: map[translate.Key][]string{}}
}

// digest is order-independent: the addresses' hashes are summed (an NB set
// has no duplicates, and translation's rows have none either).
func (w *wantedSets) digest(name string, addrs []string) setDigest {
	d := setDigest{name: name, n: len(addrs)}
	for _, a := range addrs {
		d.sum += maphash.String(w.seed, a)
	}
	return d
}

// record replaces what is wanted for keys with desired's address sets.
func (w *wantedSets) record(keys []translate.Key, desired *translate.Desired) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		old := map[string]wantedSet{}
		for _, id := range w.byKey[k] {
			old[id] = w.sets[id]
			delete(w.sets, id)
		}
		var ids []string
		if rows := desired.Rows[k]; rows != nil {
			for _, as := range rows.AddressSets {
				id := as.ExternalIDs[translate.KeyID]
				var e wantedSet
				if len(as.Addresses) > 0 {
					e.first = &as.Addresses[0]
				}
				prev, had := old[id]
				if had && prev.first == e.first && prev.digest.n == len(as.Addresses) && prev.digest.name == as.Name {
					e.digest = prev.digest
				} else {
					e.digest = w.digest(as.Name, as.Addresses)
				}
				e.older = prev.older
				if had && prev.digest != e.digest {
					e.older = append(e.older, prev.digest)
					if n := len(e.older); n > maxOlderWishes {
						e.older = e.older[n-maxOlderWishes:]
					}
				}
				w.sets[id] = e
				ids = append(ids, id)
			}
		}
		w.byKey[k] = ids
	}
}

// asWanted reports whether an NB row is exactly the set last wanted under
// its id, or one of the wishes before it whose echo had not arrived (then
// that wish and the ones before it are forgotten: NB has passed them).
func (w *wantedSets) asWanted(r *nbdb.AddressSet) bool {
	id, ok := r.ExternalIDs[translate.KeyID]
	if !ok {
		return false
	}
	d := w.digest(r.Name, r.Addresses)
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.sets[id]
	if !ok {
		return false
	}
	if e.digest == d {
		if e.older != nil {
			e.older = nil
			w.sets[id] = e
		}
		return true
	}
	for i, o := range e.older {
		if o == d {
			e.older = slices.Clone(e.older[i+1:])
			w.sets[id] = e
			return true
		}
	}
	return false
}

// isWanted reports whether a row with this row's id is wanted (a deleted
// row that is not wanted needs no sync).
func (w *wantedSets) isWanted(r *nbdb.AddressSet) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.sets[r.ExternalIDs[translate.KeyID]]
	return ok
}
