package translation

import (
	"context"
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
	// first (its observer runs in the informer's transform).
	if c.standingBack() {
		return nil // the standoff's end converges everything again
	}
	gathered := time.Now()
	st, failed := c.apply(ctx, plan)
	c.statsMu.Lock()
	c.stats.Syncs++
	c.stats.Transactions += st.Transactions
	c.stats.Operations += st.Operations
	c.stats.Changes += st.Changes
	c.stats.Services += len(translated)
	c.statsMu.Unlock()
	c.events.record(c.es.esLister, translated, c.es.x.Problems)
	if st.Changes > 0 && c.cfg.Failovers != nil && c.cfg.Failovers.Pending() {
		for _, k := range plan.keys {
			if _, bad := failed[k]; !bad && k.IsNode() {
				for _, svc := range c.es.x.ServedBy(k.Node()) {
					c.cfg.Failovers.Repointed(svc, k.Node())
				}
			}
		}
	}
	if st.Changes > 0 {
		c.log.WithField("keys", len(keys)).WithField("rows-keys", len(plan.keys)).WithField("translated", len(translated)).
			WithField("changes", st.Changes).WithField("transactions", st.Transactions).
			WithField("gather", gathered.Sub(start).Round(time.Microsecond)).
			WithField("plan", st.Plan.Round(time.Microsecond)).WithField("write", st.Write.Round(time.Microsecond)).
			Debug("nb rows converged")
	}
	return c.failures(ctx, b, failed)
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
	inBatch := map[translate.Key]bool{}
	for _, k := range b.rows {
		inBatch[k] = true
	}
	errs := controller.KeyErrors[Key]{}
	for k, err := range failed {
		if inBatch[k] {
			errs[rowsKey(k)] = err
		} else {
			c.work.Retry(ctx, rowsKey(k), err)
		}
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
