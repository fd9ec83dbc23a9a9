package selection

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// observeTimeout bounds the wait for the informer to show this
// controller's own status writes before the next decisions are made.
const observeTimeout = 5 * time.Second

// summary counts what one sync did.
type summary struct {
	decided, adopted, assigned, moved, cleared, labelPatches int
}

// sync converges keys: first the EgressServices (decide together, write
// the changed hosts), then the nodes' labels. It returns the error of each
// failed key.
func (c *Controller) sync(ctx context.Context, keys []key) (map[key]error, summary) {
	errs := &keyErrors{m: map[key]error{}}
	var sum summary
	var ess, nodes []string
	for _, k := range keys {
		if k.node {
			nodes = append(nodes, k.name)
		} else {
			ess = append(ess, k.name)
		}
	}
	if len(ess) > 0 {
		c.syncEgressServices(ctx, ess, errs, &sum)
	}
	if len(nodes) > 0 {
		c.syncNodeLabels(ctx, nodes, errs, &sum)
	}
	return errs.m, sum
}

type keyErrors struct {
	mu sync.Mutex
	m  map[key]error
}

func (e *keyErrors) set(k key, err error) {
	e.mu.Lock()
	e.m[k] = err
	e.mu.Unlock()
}

// gather reads the EgressServices of keys (those that still exist), their
// Services and EndpointSlices, every Node, the health verdicts, and the
// allocations of every other EgressService from the lister's status.host.
func (c *Controller) gather(keys []string) hosts.SelectInput {
	in := hosts.SelectInput{ClusterSubnets: c.cfg.ClusterSubnets, Services: map[string]*corev1.Service{},
		EndpointSlices: map[string][]*discoveryv1.EndpointSlice{}, Nodes: map[string]*translate.NodeInfo{},
		Reachable: c.health.reachable(), Recovering: c.health.recovering(), Allocations: map[string]int{}, MaxPerNode: c.cfg.MaxPerNode}
	batch := map[string]bool{}
	for _, k := range keys {
		ns, name, err := cache.SplitMetaNamespaceKey(k)
		if err != nil || batch[k] {
			continue
		}
		es, err := c.esLister.EgressServices(ns).Get(name)
		if err != nil {
			continue
		}
		batch[k] = true
		in.EgressServices = append(in.EgressServices, es)
		if svc, err := c.svcLister.Services(ns).Get(name); err == nil {
			in.Services[k] = svc
		}
		objs, _ := c.sliceIndex.ByIndex(controller.IndexByService, k)
		for _, o := range objs {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok {
				in.EndpointSlices[k] = append(in.EndpointSlices[k], s)
			}
		}
	}
	in.Networks = translate.IngressNetworks{ClusterSubnets: c.cfg.ClusterSubnets, JoinSubnets: c.cfg.JoinSubnets, ServiceCIDRs: c.cfg.ServiceCIDRs}
	in.IngressClaims = c.ingressClaims(in)
	in.LabelClaims = c.labelClaims(in)
	nodes, _ := c.nodeLister.List(labels.Everything())
	in.NodeIPs = c.nodeIPs(nodes)
	for _, n := range nodes {
		in.Nodes[n.Name] = &translate.NodeInfo{Name: n.Name, Ready: translate.NodeReady(n), Labels: n.Labels}
		objs, _ := c.esIndexer.ByIndex(controller.IndexByHost, n.Name)
		for _, o := range objs {
			if e, ok := o.(*egressv1.EgressService); ok && !batch[translate.EgressServiceKey(e)] && e.Spec.SourceIPBy != egressv1.Network {
				in.Allocations[n.Name]++
			}
		}
	}
	return in
}

// ingressClaims lists, for each ingress IP of the batch's Services, the
// LoadBalancerIP EgressServices whose Service has it (from the Services'
// ingress-IP index).
func (c *Controller) ingressClaims(in hosts.SelectInput) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for _, svc := range in.Services {
		for _, ip := range ingressOf(svc) {
			if _, done := out[ip]; done {
				continue
			}
			objs, _ := c.svcIndex.ByIndex(controller.IndexByIngressIP, ip.String())
			claims := []string{}
			for _, o := range objs {
				sv, ok := o.(*corev1.Service)
				if !ok {
					continue
				}
				if es, err := c.esLister.EgressServices(sv.Namespace).Get(sv.Name); err == nil && es.Spec.SourceIPBy != egressv1.Network {
					claims = append(claims, sv.Namespace+"/"+sv.Name)
				}
			}
			out[ip] = claims
		}
	}
	return out
}

// labelClaims lists, for the host label of each of the batch's
// EgressServices, the LoadBalancerIP EgressServices with that label (from
// the EgressServices' host-label index).
func (c *Controller) labelClaims(in hosts.SelectInput) map[string][]hosts.LabelClaim {
	out := map[string][]hosts.LabelClaim{}
	for _, es := range in.EgressServices {
		label := hosts.NodeLabel(es.Namespace, es.Name)
		if _, done := out[label]; done {
			continue
		}
		objs, _ := c.esIndexer.ByIndex(controller.IndexByHostLabel, label)
		claims := []hosts.LabelClaim{}
		for _, o := range objs {
			if e, ok := o.(*egressv1.EgressService); ok && e.Spec.SourceIPBy != egressv1.Network {
				claims = append(claims, hosts.LabelClaim{Key: translate.EgressServiceKey(e), Created: e.CreationTimestamp.Time})
			}
		}
		out[label] = claims
	}
	return out
}

// nodeAddrs is one Node's own addresses at a resourceVersion.
type nodeAddrs struct {
	version string
	ips     []netip.Addr
}

// nodeIPs maps every node's own addresses to its name, parsing only the
// Nodes whose resourceVersion changed since the last call.
func (c *Controller) nodeIPs(nodes []*corev1.Node) map[netip.Addr]string {
	if c.nodeAddrs == nil {
		c.nodeAddrs = map[string]nodeAddrs{}
	}
	seen := make(map[string]bool, len(nodes))
	out := map[netip.Addr]string{}
	for _, n := range nodes {
		seen[n.Name] = true
		a, ok := c.nodeAddrs[n.Name]
		if !ok || a.version != n.ResourceVersion {
			a = nodeAddrs{version: n.ResourceVersion, ips: translate.NodeAddresses(n)}
			c.nodeAddrs[n.Name] = a
		}
		for _, ip := range a.ips {
			out[ip] = n.Name
		}
	}
	for name := range c.nodeAddrs {
		if !seen[name] {
			delete(c.nodeAddrs, name)
		}
	}
	return out
}

// syncEgressServices decides the hosts of keys together, writes those that
// changed (in parallel), waits until the informer shows the writes (so the
// next decisions count them), and records Events.
func (c *Controller) syncEgressServices(ctx context.Context, keys []string, errs *keyErrors, sum *summary) {
	in := c.gather(keys)
	found := map[string]bool{}
	for _, es := range in.EgressServices {
		found[translate.EgressServiceKey(es)] = true
	}
	for _, k := range keys {
		if !found[k] {
			c.events.forget(k)
			c.moves.forget(k)
		}
	}
	damped := c.moves.damped(in.EgressServices)
	in.Damped = make(map[string]bool, len(damped))
	for k := range damped {
		in.Damped[k] = true
	}
	// After gather: whatever the listers showed it, the standoff had seen
	// first (its observer runs in the informer's transform).
	if c.standingBack() {
		return // the standoff's end enqueues every key again
	}
	res := hosts.SelectHosts(in)
	var changed []*egressv1.EgressService
	for _, es := range in.EgressServices {
		k := translate.EgressServiceKey(es)
		sel := res.Selections[k]
		sum.decided++
		if sel.Damped {
			c.work.AddAfter(key{name: k}, damped[k]) // decided again when the damping ends
		}
		switch {
		case sel.Changed() && c.held(k):
			continue // its status.host stays as another writer left it
		case !sel.Changed():
			if sel.Host != "" && sel.Host != egressv1.HostAll {
				sum.adopted++
				if !sel.Damped {
					c.moves.kept(es)
				}
			}
			continue
		case sel.Host == "":
			sum.cleared++
		case sel.Current == "":
			sum.assigned++
		default:
			sum.moved++
		}
		changed = append(changed, es)
	}
	var mu sync.Mutex
	written := map[string][]string{} // key → the resourceVersions older than the write
	open := func() {}
	if len(changed) > 0 {
		open = c.cfg.HostMoves.Close()
	}
	defer open() // an early return (ctx ended) opens it too
	c.parallel(len(changed), func(i int) {
		es := changed[i]
		k := translate.EgressServiceKey(es)
		sel := res.Selections[k]
		out, older, err := c.writeHost(ctx, es, sel.Host)
		if err != nil {
			errs.set(key{name: k}, err)
			return
		}
		if out == nil {
			return
		}
		mu.Lock()
		written[k] = older
		mu.Unlock()
		c.events.hostWritten(out, sel)
		c.cfg.Metrics.hostChanged(sel)
		if sel.Cause == hosts.CauseSelector {
			c.moves.moved(es)
		}
		if sel.Cause == hosts.CauseUnreachable && c.cfg.Failovers != nil && c.health != nil && sel.Host != "" {
			c.cfg.Failovers.Drained(k, sel.Host, c.health.lastAnswered(sel.Current))
		}
		c.log.WithFields(map[string]any{"key": k, "from": sel.Current, "to": sel.Host, "why": sel.Why}).Info("host selected")
	})
	c.waitObserved(ctx, written)
	open()
	for _, es := range in.EgressServices {
		k := translate.EgressServiceKey(es)
		c.events.problems(es, res.Problems.For(k), res.Selections[k].Host)
	}
	c.statsMu.Lock()
	c.stats.Syncs++
	c.stats.StatusWrites += len(written)
	c.statsMu.Unlock()
}

// writeHost writes status.host through the status subresource. The first
// attempt uses the lister's copy; a conflict re-reads the object from the
// API server and retries (client-go's RetryOnConflict), unless its spec
// changed meanwhile — then the key is decided again instead. It returns the
// updated object, or nil when nothing was written (the object is gone, or
// already says host), and the resourceVersions it saw before its write.
func (c *Controller) writeHost(ctx context.Context, es *egressv1.EgressService, host string) (*egressv1.EgressService, []string, error) {
	api := c.egress.K8sV1().EgressServices(es.Namespace)
	k := translate.EgressServiceKey(es)
	var written *egressv1.EgressService
	older := []string{es.ResourceVersion}
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := es.DeepCopy()
		if !first {
			fresh, err := api.Get(ctx, es.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return err
			case fresh.UID != es.UID || fresh.Generation != es.Generation:
				c.work.Add(key{name: k})
				return nil
			}
			cur = fresh
			older = append(older, fresh.ResourceVersion)
		}
		first = false
		if cur.Status.Host == host {
			return nil
		}
		cur.Status.Host = host
		out, err := api.UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: fieldManager})
		switch {
		case apierrors.IsConflict(err):
			c.statsMu.Lock()
			c.stats.Conflicts++
			c.statsMu.Unlock()
		case apierrors.IsNotFound(err):
			return nil
		case err == nil:
			written = out
		}
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("write status.host %q of %s: %w", host, k, err)
	}
	return written, older, nil
}

// waitObserved waits (bounded) until the lister shows a version of every
// written EgressService newer than every version seen before the write
// (the one decided on, and those re-read after conflicts; an informer sees
// versions in order): read-your-writes, so that the next decisions start
// from these hosts and allocation counts include them.
func (c *Controller) waitObserved(ctx context.Context, written map[string][]string) {
	if len(written) == 0 {
		return
	}
	err := wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, observeTimeout, true, func(context.Context) (bool, error) {
		for k, older := range written {
			ns, name, _ := cache.SplitMetaNamespaceKey(k)
			if cur, err := c.esLister.EgressServices(ns).Get(name); err == nil && slices.Contains(older, cur.ResourceVersion) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		c.log.WithError(err).Debug("informer has not shown every status write yet")
	}
}

// syncNodeLabels makes each node's egress-service labels exactly those of
// the EgressServices whose status.host it is (JSON merge patch of the
// labels only; stray labels with the prefix are removed).
func (c *Controller) syncNodeLabels(ctx context.Context, nodes []string, errs *keyErrors, sum *summary) {
	var mu sync.Mutex
	c.parallel(len(nodes), func(i int) {
		name := nodes[i]
		n, err := c.nodeLister.Get(name)
		if err != nil {
			return // deleted: its labels went with it
		}
		objs, _ := c.esIndexer.ByIndex(controller.IndexByHost, name)
		var hosted []*egressv1.EgressService
		for _, o := range objs {
			if e, ok := o.(*egressv1.EgressService); ok {
				hosted = append(hosted, e)
			}
		}
		patch := c.withoutHeld(hosts.LabelPatch(n.Labels, hosts.HostedLabels(name, hosted)))
		if patch == nil || c.standingBack() {
			return
		}
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
		if err == nil {
			_, err = c.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
		}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs.set(key{node: true, name: name}, fmt.Errorf("patch egress-service labels of node %s: %w", name, err))
		default:
			mu.Lock()
			sum.labelPatches++
			mu.Unlock()
			c.statsMu.Lock()
			c.stats.LabelPatches++
			c.statsMu.Unlock()
			c.log.WithField("node", name).WithField("labels", string(body)).Debug("node labels patched")
		}
	})
}

// held reports (and counts) an EgressService whose status.host another
// writer's hold keeps.
func (c *Controller) held(key string) bool {
	if c.cfg.Standoff == nil || !c.cfg.Standoff.Held(key) {
		return false
	}
	c.statsMu.Lock()
	c.stats.Held++
	c.statsMu.Unlock()
	return true
}

// withoutHeld drops the labels of held EgressServices from a label patch
// (nil when nothing is left): another writer's label stays as it is.
func (c *Controller) withoutHeld(patch map[string]*string) map[string]*string {
	if c.cfg.Standoff == nil || len(patch) == 0 {
		return patch
	}
	for _, k := range c.cfg.Standoff.HeldKeys() {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		delete(patch, hosts.NodeLabel(ns, name))
	}
	if len(patch) == 0 {
		return nil
	}
	return patch
}

// standingBack reports (and counts) a write the standoff forbids.
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

// parallel runs f(0..n-1) with at most cfg.Writers at a time.
func (c *Controller) parallel(n int, f func(i int)) { controller.Parallel(n, c.cfg.Writers, f) }
