package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sirupsen/logrus"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// sync takes the node to the plan, in the order that keeps packets from
// reaching a host that cannot SNAT them (DESIGN §3):
//
//  1. add and update (nothing is deleted) — new SNAT elements and rules
//     exist before anyone is told;
//  2. publish the report of what now exists: new and changed services are
//     added, services about to lose state are withdrawn;
//  3. if anything was withdrawn, wait WithdrawGrace so the master takes
//     those endpoints out of the reroute;
//  4. delete what nobody wants any more and publish again.
//
// A failure in 1 or 2 returns before anything is deleted. Nothing at all is
// written while ovn-kubernetes' own egress-service chain is here
// (standingBack).
func (c *Controller) sync(ctx context.Context) error {
	start := time.Now()
	if back, err := c.standingBack(ctx); back || err != nil {
		return err
	}
	in, err := c.gather()
	if err != nil {
		return err
	}
	plan := nodeplan.NodePlan(in)
	before, err := c.currentReport()
	if err != nil {
		return err
	}

	gathered := time.Now()
	res, applyErr := c.apply(ctx, plan.Desired, ApplyOptions{KeepStale: true})
	applied := time.Now()
	ready := plan.ReportReached(res.Reached)
	if applyErr != nil {
		c.d.Metrics.applied(res, len(ready), applyErr)
	}
	published, err := c.publish(ctx, ready)
	if published {
		c.d.Metrics.reported(time.Since(start))
	}
	reported := time.Now()
	if err = errors.Join(applyErr, err); err != nil {
		return err
	}
	gone := withdrawn(before, ready)
	if len(gone) > 0 && res.Stale > 0 {
		c.log.WithFields(logrus.Fields{"withdrawn": gone, "grace": c.cfg.WithdrawGrace}).
			Info("withdrew services from the readiness report; waiting before removing their state")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.cfg.WithdrawGrace):
		}
	}
	// Nothing stale: the add phase already reached the plan.
	res2, applyErr := Result{Reached: res.Reached}, error(nil)
	if res.Stale > 0 {
		res2, applyErr = c.apply(ctx, plan.Desired, ApplyOptions{})
	}
	ready = plan.ReportReached(res2.Reached)
	c.d.Metrics.applied(res2, len(ready), applyErr)
	published2, err := c.publish(ctx, ready)
	if published2 {
		c.d.Metrics.reported(time.Since(start))
	}
	c.emitProblems(append(plan.Problems, c.routeProblems(plan)...))
	c.emitNodeProblems()
	fields := logrus.Fields{"services": len(plan.Services), "ready": len(ready), "rules": len(plan.Desired.Rules),
		"snat": len(plan.Desired.SNAT), "added": res.Added + res2.Added, "deleted": res2.Deleted,
		"published": published || published2, "duration": time.Since(start),
		"gather": gathered.Sub(start), "apply": applied.Sub(gathered), "report": reported.Sub(applied)}
	if fwd := append(res.Forwarding, res2.Forwarding...); len(fwd) > 0 {
		fields["forwarding"] = fwd
	}
	if res.Changed() || res2.Changed() || published || published2 {
		c.log.WithFields(fields).Info("node synced")
	} else {
		c.log.WithFields(fields).Debug("node in sync")
	}
	return errors.Join(applyErr, err)
}

// gather reads the plan's inputs from the listers and resolves the network
// names of the services programmed here.
func (c *Controller) gather() (nodeplan.NodePlanInput, error) {
	in := nodeplan.NodePlanInput{Node: c.cfg.NodeName, ClusterSubnets: c.cfg.ClusterSubnets, Config: c.cfg.planConfig()}
	if n, err := c.nodeLister.Get(c.cfg.NodeName); err == nil {
		info := translate.ParseNode(n, nil)
		in.NodeSubnets, in.LocalGateway = info.Subnets, info.GatewayMode == translate.GatewayModeLocal
	}
	nodes, err := c.nodeIPsLst.List(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes {
		in.NodeIPs = append(in.NodeIPs, translate.ParseNode(n, nil).HostIPs...)
	}
	all, err := c.esLister.List(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("list EgressServices: %w", err)
	}
	for _, es := range all {
		if !nodeplan.HostedOn(es, c.cfg.NodeName) {
			continue
		}
		in.EgressServices = append(in.EgressServices, es)
		svc, err := c.svcLister.Services(es.Namespace).Get(es.Name)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return in, fmt.Errorf("get Service %s/%s: %w", es.Namespace, es.Name, err)
		}
		in.Services = append(in.Services, svc)
		objs, err := c.sliceIndex.ByIndex(controller.IndexByService, es.Namespace+"/"+es.Name)
		if err != nil {
			return in, fmt.Errorf("EndpointSlices of %s/%s: %w", es.Namespace, es.Name, err)
		}
		for _, o := range objs {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok {
				in.EndpointSlices = append(in.EndpointSlices, s)
			}
		}
	}
	in.Tables, err = c.d.Resolver.ResolveAll(nodeplan.NodeNetworkNames(c.cfg.NodeName, in.EgressServices))
	if err != nil {
		return in, fmt.Errorf("resolve networks: %w", err)
	}
	return in, nil
}

// apply runs the applier inside the agent's network namespace.
func (c *Controller) apply(ctx context.Context, st nodeplan.NodeState, opts ApplyOptions) (Result, error) {
	var res Result
	var err error
	if nsErr := c.d.Namespace.Do(func() error {
		res, err = c.d.Applier.Apply(ctx, st, opts)
		return nil
	}); nsErr != nil {
		return res, nsErr
	}
	return res, err
}

// emitProblems posts a Warning Event for each problem that is new since
// the previous sync (a problem that persists is not repeated every sync).
func (c *Controller) emitProblems(ps translate.Problems) {
	now := make(map[translate.Problem]bool, len(ps))
	for _, p := range ps {
		now[p] = true
		if c.problems[p] {
			continue
		}
		ns, name, ok := splitKey(p.Key)
		if !ok {
			continue
		}
		es, err := c.esLister.EgressServices(ns).Get(name)
		if err != nil {
			continue
		}
		c.d.Recorder.Event(es, corev1.EventTypeWarning, string(p.Reason), p.Message)
		c.log.WithFields(logrus.Fields{"key": p.Key, "reason": p.Reason}).Info(p.Message)
	}
	c.problems = now
}

func splitKey(key string) (string, string, bool) { return strings.Cut(key, "/") }

// emitNodeProblems posts a Warning Event on this node's Node when the set
// of its ovn-kubernetes annotations that cannot be read changes: what they
// say is not used (a gateway config that cannot be read counts as shared
// gateway mode, node subnets that cannot be read as none), which the
// operator must hear of rather than find in changed behaviour.
func (c *Controller) emitNodeProblems() {
	n, err := c.nodeLister.Get(c.cfg.NodeName)
	if err != nil {
		return
	}
	ps := translate.ParseNode(n, nil).Problems
	now := strings.Join(ps, "; ")
	if now == c.nodeProblems {
		return
	}
	c.nodeProblems = now
	if now == "" {
		return
	}
	msg := "node " + n.Name + ": annotations that cannot be read, not used: " + now
	c.d.Recorder.Event(n, corev1.EventTypeWarning, string(translate.ReasonNodeAnnotationInvalid), msg)
	c.log.WithField("reason", translate.ReasonNodeAnnotationInvalid).Warn(msg)
}

type tableFamily struct {
	table  uint32
	family ipfamily.Family
}

// routeProblems warns about services whose rules point at a table with no
// route of that family: such traffic silently falls through to the next
// rules. A table found with routes is not read again (routing tables can be
// large); empty ones are re-read every sync.
func (c *Controller) routeProblems(plan nodeplan.NodePlanOutput) translate.Problems {
	var ps translate.Problems
	for _, s := range plan.Services {
		seen := map[tableFamily]bool{}
		for _, r := range s.Rules {
			tf := tableFamily{r.Table, r.Family}
			if seen[tf] {
				continue
			}
			seen[tf] = true
			if !c.tableHasRoutes(tf) {
				ps = append(ps, translate.Problem{Key: s.Key, Reason: ReasonNetworkWithoutRoutes, Message: fmt.Sprintf(
					"node %s: routing table %d has no %s route; this service's %s traffic falls through to the main routing",
					c.cfg.NodeName, r.Table, r.Family.Name(), r.Family.Name())})
			}
		}
	}
	return ps
}

func (c *Controller) tableHasRoutes(tf tableFamily) bool {
	if c.routes[tf] {
		return true
	}
	routes, err := c.d.Netlink.RouteListTable(netlinkFamily(tf.family), int(tf.table))
	if err != nil {
		c.log.WithError(err).WithField("table", tf.table).Debug("could not read routing table")
		return true
	}
	if len(routes) > 0 {
		c.routes[tf] = true
	}
	return len(routes) > 0
}
