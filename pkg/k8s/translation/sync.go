package translation

import (
	"context"
	"slices"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// sync converges a batch of keys: each translator gathers its keys and
// says which rows to write, and the applier writes them in one transaction.
func (c *Controller) sync(ctx context.Context, keys []Key) error {
	start := time.Now()
	b := split(keys)
	plan, translated, err := c.es.sync(ctx, b)
	if err != nil {
		return err
	}
	// After gather: whatever the listers showed it, the standoff had seen
	// first (its observer runs in the informer's transform). Its end
	// converges everything again.
	if c.standingBack() {
		plan, translated = rowsPlan{}, nil
	}
	eipPlan, reported, err := c.syncEgressIPs(ctx, b)
	if err != nil {
		return err
	}
	plan = plan.with(eipPlan)
	gathered := time.Now()
	c.wanted.record(plan.keys, plan.desired, c.es.x.Digests)
	st, failed := c.apply(ctx, plan)
	if reported != nil && !eipFailed(eipPlan, failed) {
		reported()
	}
	c.statsMu.Lock()
	if c.eip != nil {
		c.eipStats, c.eipStanding = c.eip.stats, c.eip.standing
	}
	c.statsMu.Unlock()
	c.statsMu.Lock()
	c.stats.Syncs++
	c.stats.Transactions += st.Transactions
	c.stats.Operations += st.Operations
	c.stats.Changes += st.Changes
	c.stats.Services += len(translated)
	c.statsMu.Unlock()
	c.events.record(c.es.esLister, translated, c.es.x.Problems)
	if st.Changes > 0 && c.cfg.Failovers != nil && c.cfg.Failovers.Pending() {
		c.repointed(b, translated, plan.keys, failed)
	}
	if st.Changes > 0 {
		c.log.WithField("keys", len(keys)).WithField("rows-keys", len(plan.keys)).WithField("translated", len(translated)).
			WithField("changes", st.Changes).WithField("transactions", st.Transactions).
			WithField("gather", gathered.Sub(start).Round(time.Microsecond)).
			WithField("plan", st.Plan.Round(time.Microsecond)).WithField("write", st.Write.Round(time.Microsecond)).
			Debug("nb rows converged")
	} else if d := time.Since(start); d > slowSync {
		c.log.WithField("keys", len(keys)).WithField("translated", len(translated)).WithField("all", b.all).
			WithField("took", d.Round(time.Microsecond)).Debug("sync wrote nothing")
	}
	return c.failures(ctx, b, failed)
}

// slowSync is how long a sync that wrote nothing may take before the debug
// log names it.
const slowSync = 20 * time.Millisecond

// syncEgressIPs is the EgressIP translator's part of a batch.
func (c *Controller) syncEgressIPs(ctx context.Context, b batch) (rowsPlan, func(), error) {
	if c.eip == nil || (!b.all && len(b.egressIPs) == 0) {
		return rowsPlan{}, nil, nil
	}
	names := b.egressIPs
	if b.all {
		names = []string{""}
	}
	return c.eip.sync(ctx, names)
}

// eipFailed reports whether a key of the EgressIP plan failed.
func eipFailed(p rowsPlan, failed map[translate.Key]error) bool {
	for _, k := range p.keys {
		if _, bad := failed[k]; bad {
			return true
		}
	}
	return false
}

// with merges two translators' plans (their keys are disjoint).
func (p rowsPlan) with(o rowsPlan) rowsPlan {
	if len(o.keys) == 0 {
		return p
	}
	if p.desired == nil {
		return o
	}
	p.keys = append(slices.Clip(p.keys), o.keys...)
	p.desired.Merge(o.desired)
	return p
}

// repointed tells Config.Failovers of the services whose endpoints are now
// in their host's rows: those translated in this sync, and those of the
// hosts whose rows a retried row key wrote.
func (c *Controller) repointed(b batch, translated []string, keys []translate.Key, failed map[translate.Key]error) {
	written := map[translate.Key]bool{}
	for _, k := range keys {
		if _, bad := failed[k]; !bad {
			written[k] = true
		}
	}
	for _, svc := range translated {
		if host, ok := c.es.x.ServingHost(svc); ok && written[translate.NodeKey(host)] {
			c.cfg.Failovers.Repointed(svc, host)
		}
	}
	for _, k := range b.rows {
		if k.IsNode() && written[k] {
			for _, svc := range c.es.x.ServedBy(k.Node()) {
				c.cfg.Failovers.Repointed(svc, k.Node())
			}
		}
	}
}

// apply writes a plan's rows in one transaction. When it fails, the keys
// are written one by one, so that one key's rows (a router that went) do
// not hold the others back; it returns the keys that failed.
func (c *Controller) apply(ctx context.Context, p rowsPlan) (ovn.Stats, map[translate.Key]error) {
	if len(p.keys) == 0 {
		return ovn.Stats{}, nil
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.ApplyTimeout)
	defer cancel()
	st, err := c.applier.Apply(actx, p.keys, p.desired)
	if err == nil {
		return st, nil
	}
	failed := map[translate.Key]error{}
	if len(p.keys) == 1 || actx.Err() != nil {
		for _, k := range p.keys {
			failed[k] = err
		}
		return st, failed
	}
	c.log.WithError(err).WithField("keys", len(p.keys)).Info("NB transaction failed; writing key by key")
	for _, k := range p.keys {
		one, err := c.applier.Apply(actx, []translate.Key{k}, p.desired)
		st.Transactions += one.Transactions
		st.Operations += one.Operations
		st.Changes += one.Changes
		if err != nil {
			failed[k] = err
		}
	}
	return st, failed
}

// failures turns the keys whose rows were not written into retries: a row
// key of the batch fails with its error; any other (rows a service touched)
// is retried as a row key of its own, with backoff. The services are done:
// their translation is in the Index, and the retried row keys write it.
func (c *Controller) failures(ctx context.Context, b batch, failed map[translate.Key]error) error {
	if len(failed) == 0 {
		return nil
	}
	inBatch := map[Key]bool{}
	for _, k := range b.rows {
		inBatch[rowsKey(k)] = true
	}
	for _, n := range b.egressIPs {
		inBatch[egressIPKey(n)] = true
	}
	errs := controller.KeyErrors[Key]{}
	retry := map[Key]error{}
	for k, err := range failed {
		key := rowsKey(k)
		if name, eip := k.EgressIP(); eip {
			key = egressIPKey(name)
			if !inBatch[key] && (b.all || inBatch[egressIPKey("")]) {
				key = egressIPKey("") // the whole sync's: retried as one
			}
		}
		if inBatch[key] {
			errs[key] = err
		} else {
			retry[key] = err
		}
	}
	for k, err := range retry {
		c.work.Retry(ctx, k, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

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
