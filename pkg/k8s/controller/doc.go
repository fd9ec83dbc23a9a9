// Package controller is the one skeleton of ovn-egress's level-driven
// controllers (the master's translation and host selection, the node
// agent): event handlers that only enqueue keys (tombstones unwrapped
// once, here), a rate-limited worker that drains the keys in batches with
// one rule for cancellation and requeue (a key is never dropped; an error
// is logged once, here), the informer indexers the controllers share under
// one set of names, the Event recorder, and the instrumentation of all of
// it (Metrics).
package controller
