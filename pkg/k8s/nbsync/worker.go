package nbsync

import (
	"context"
	"fmt"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// standingBack reports (and counts) a sync the standoff forbids to write.
func (c *Controller) standingBack() bool {
	if c.cfg.Standoff == nil {
		return false
	}
	if _, blocked := c.cfg.Standoff.Blocked(); !blocked {
		return false
	}
	c.statsMu.Lock()
	c.stats.Blocked++
	c.statsMu.Unlock()
	return true
}

// sync converges keys: gather → translate → apply.
func (c *Controller) sync(ctx context.Context, keys []translate.Key) error {
	start := time.Now()
	moved := c.dirt.take(keys)
	in, err := c.gather(ctx, keys, moved, true)
	if err != nil {
		return err
	}
	// After gather: whatever the listers showed it, the standoff had seen
	// first (its observer runs in the informer's transform).
	if c.standingBack() {
		return nil // the standoff's end enqueues every key again
	}
	gathered := time.Now()
	c.goneMu.Lock()
	for _, key := range c.gone {
		c.memo.Forget(key)
	}
	c.gone = nil
	c.goneMu.Unlock()
	in.Memo = c.memo
	desired := translate.Translate(in)
	if desired.Stale {
		// A kept service's result is gone from the Memo (the NB's features
		// changed its configuration): translate every service again.
		c.log.WithField("kept", len(in.Kept)).WithField("unlisted", len(in.Unlisted)).Debug("kept services or unlisted hosts are not in the memo; translating every service of the keys again")
		if in, err = c.gather(ctx, keys, nil, false); err != nil {
			return err
		}
		in.Memo = c.memo
		desired = translate.Translate(in)
	}
	reused := c.memo.Stats()
	translated := time.Now()
	c.wanted.record(keys, desired)
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := c.applier.Apply(actx, keys, desired)
	c.statsMu.Lock()
	c.stats.Syncs++
	c.stats.Transactions += st.Transactions
	c.stats.Operations += st.Operations
	c.stats.Changes += st.Changes
	c.stats.Services += len(in.EgressServices) + len(in.Kept)
	c.stats.Kept += len(in.Kept)
	c.stats.Unlisted += len(in.Unlisted)
	c.statsMu.Unlock()
	if err != nil {
		return err
	}
	c.events.record(c.esLister, in, desired.Problems)
	if st.Changes > 0 && c.cfg.Failovers != nil && c.cfg.Failovers.Pending() {
		repointed(c.cfg.Failovers, &in, desired)
	}
	if st.Changes > 0 {
		c.log.WithField("keys", len(keys)).WithField("services", len(in.EgressServices)+len(in.Kept)).WithField("changes", st.Changes).
			WithField("transactions", st.Transactions).WithField("gather", gathered.Sub(start).Round(time.Microsecond)).
			WithField("translate", translated.Sub(gathered).Round(time.Microsecond)).
			WithField("reused", fmt.Sprintf("%d/%d services (%d kept), %d/%d sets (%d patched), %d hosts unlisted (%d contributions kept)",
				reused.ServicesReused, reused.Services, len(in.Kept), reused.SetsReused, reused.Sets, reused.SetsPatched, len(in.Unlisted), reused.Unlisted)).
			WithField("apply", time.Since(translated).Round(time.Microsecond)).WithField("plan", st.Plan.Round(time.Microsecond)).
			WithField("write", st.Write.Round(time.Microsecond)).Debug("nb rows converged")
	}
	return nil
}

// repointed tells f of every service of in whose endpoints are now in its
// host's rows (an address set or a NAT row of the host's key). Each host's
// addresses are indexed once per call: a drain moves hundreds of services
// onto every dirty host.
func repointed(f Failovers, in *translate.Input, desired *translate.Desired) {
	index := map[string]map[string]bool{}
	for _, es := range in.EgressServices {
		host := es.Status.Host
		rows := desired.Rows[translate.NodeKey(host)]
		if host == "" || rows == nil {
			continue
		}
		k := translate.EgressServiceKey(es)
		eps, ok := in.Endpoints[k]
		if !ok {
			if svc := in.Services[k]; svc != nil {
				eps = translate.ServiceEndpoints(svc, in.EndpointSlices[k], in.Config.ClusterSubnets)
			}
		}
		if len(eps) == 0 {
			continue
		}
		addrs, ok := index[host]
		if !ok {
			addrs = addressesOf(rows)
			index[host] = addrs
		}
		if addrs[eps[0].IP.String()] {
			f.Repointed(k, host)
		}
	}
}

// addressesOf is every pod address of rows' address sets and NAT rows.
func addressesOf(rows *translate.Rows) map[string]bool {
	out := map[string]bool{}
	for _, s := range rows.AddressSets {
		for _, a := range s.Addresses {
			out[a] = true
		}
	}
	for _, n := range rows.NATs {
		out[n.LogicalIP] = true
	}
	return out
}
