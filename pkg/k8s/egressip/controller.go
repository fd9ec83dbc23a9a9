// Package egressip is the master's EgressIP assignment controller: it
// decides which node holds each IP of every EgressIP with
// translate.AssignEgressIPs, writes status.items (a patch on the main
// resource: the CRD has no status subresource, as upstream's), and reports every IP left unassigned as an Event on its
// EgressIP. Its rows controller (Rows, rows.go) writes the NB rows of what
// it assigned (docs/egressip.md).
//
// It is level-driven on one key: assignment is a decision over every
// EgressIP and every node together (fewest assignments first, one owner per
// IP), so every change enqueues the same key and a sync re-reads everything
// from the listers; EgressIPs are few next to services and pods.
package egressip

import (
	"context"
	"encoding/json"
	"fmt"
	eipt "github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	eipinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/informers/externalversions"
	eiplisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/listers/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
)

// Config tunes the controller.
type Config struct {
	// Unreachable, when set, returns the nodes the health checks found
	// unreachable now (nil: every node counts as reachable).
	Unreachable func() map[string]bool
	// Recovering, when set, returns the nodes in their health hold-down
	// (answering again after being unreachable): candidates of last resort.
	Recovering func() map[string]bool
	// Work, when set, records the worker's syncs, queue and errors.
	Work *controller.Metrics
	// Standoff, when set, says when ovn-kubernetes' own EgressIP serves
	// pods (in the central NB, or in a zone's: the agents report it): its
	// cluster-manager assigns then, and two assigners would move IPs apart.
	Standoff Standoff
}

// Standoff tells the EgressIP controllers to write nothing, and why.
type Standoff interface {
	EgressIPBlocked() (why string, blocked bool)
}

// all is the assignment controller's one key.
const all = "*"

// Controller assigns egress IPs. Build it with New before the informer
// factories start; only the leader runs it.
type Controller struct {
	oneKey
	cfg    Config
	client eipclient.Interface

	eipLister  eiplisters.EgressIPLister
	nodeLister corelisters.NodeLister

	events *Reporter
	mu     sync.Mutex
	stats  Stats
}

// Stats counts what the controller did since it was built.
type Stats struct {
	Syncs, StatusWrites, Events int
	// Blocked counts the syncs the standoff stopped.
	Blocked int
}

// New wires the controller to the informer factories (not started yet).
func New(cfg Config, log *logrus.Entry, client eipclient.Interface, kubeInf kubeinformers.SharedInformerFactory,
	eipInf eipinformers.SharedInformerFactory, recorder record.EventRecorder) (*Controller, error) {
	eips, nodes := eipInf.K8s().V1().EgressIPs(), kubeInf.Core().V1().Nodes()
	c := &Controller{cfg: cfg, client: client, eipLister: eips.Lister(), nodeLister: nodes.Lister(), events: NewReporter(recorder, nil)}
	c.oneKey = newOneKey("egress IP assignment", "egressip", 1, log, cfg.Work, c.sync,
		[]cache.InformerSynced{eips.Informer().HasSynced, nodes.Informer().HasSynced})
	enqueue := controller.OnObject(func(any) { c.enqueue() })
	if _, err := eips.Informer().AddEventHandler(enqueue); err != nil {
		return nil, fmt.Errorf("egressip handler: %w", err)
	}
	nodeChanged := controller.OnChange(func(old, obj any) {
		o, _ := controller.As[*corev1.Node](old)
		n, ok := controller.As[*corev1.Node](obj)
		if !ok || o == nil || nodeFactsDiffer(o, n) {
			c.enqueue()
		}
	})
	if _, err := nodes.Informer().AddEventHandler(nodeChanged); err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	return c, nil
}

// nodeFactsDiffer reports whether a Node update changes what assignment
// reads: the label, readiness or the address annotations.
func nodeFactsDiffer(a, b *corev1.Node) bool {
	_, la := a.Labels[eipt.LabelEgressAssignable]
	_, lb := b.Labels[eipt.LabelEgressAssignable]
	return la != lb || translate.NodeReady(a) != translate.NodeReady(b) ||
		a.Annotations[translate.AnnotPrimaryIfAddr] != b.Annotations[translate.AnnotPrimaryIfAddr] ||
		a.Annotations[translate.AnnotHostCIDRs] != b.Annotations[translate.AnnotHostCIDRs] ||
		!slices.Equal(a.Status.Addresses, b.Status.Addresses)
}

// Enqueue asks for a sync (a health verdict changed).
func (c *Controller) Enqueue() { c.enqueue() }

// Stats returns the counters so far.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// sync gathers every EgressIP and node, assigns, writes the statuses that
// changed and reports the problems that changed.
func (c *Controller) sync(ctx context.Context, _ []string) error {
	if c.cfg.Standoff != nil {
		if _, blocked := c.cfg.Standoff.EgressIPBlocked(); blocked {
			c.mu.Lock()
			c.stats.Blocked++
			c.mu.Unlock()
			return nil // the standoff's end enqueues it again
		}
	}
	eips, err := c.eipLister.List(labels.Everything())
	if err != nil {
		return err
	}
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	var unreachable, recovering map[string]bool
	if c.cfg.Unreachable != nil {
		unreachable = c.cfg.Unreachable()
	}
	if c.cfg.Recovering != nil {
		recovering = c.cfg.Recovering()
	}
	in := eipt.EgressIPInput{EgressIPs: eips, Nodes: map[string]*eipt.EgressIPNode{}}
	for _, n := range nodes {
		in.Nodes[n.Name] = eipt.ParseEgressIPNode(n, !unreachable[n.Name])
		in.Nodes[n.Name].Recovering = recovering[n.Name]
	}
	res := eipt.AssignEgressIPs(in)
	var errs []error
	writes := 0
	for _, e := range eips {
		conds, condsChanged := eipConditions(e, res, time.Now())
		if !res.Changed(e) && !condsChanged {
			continue
		}
		if err := c.writeStatus(ctx, e, res.Items[e.Name], conds); err != nil {
			errs = append(errs, fmt.Errorf("EgressIP %s: %w", e.Name, err))
			continue
		}
		writes++
		c.log.WithField("egressip", e.Name).WithField("items", itemsString(res.Items[e.Name])).Info("egress IPs assigned")
	}
	events := c.events.Report(eips, res.Problems, nil)
	c.mu.Lock()
	c.stats.Syncs++
	c.stats.StatusWrites += writes
	c.stats.Events += events
	c.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("%d status writes failed: %w", len(errs), errs[0])
	}
	return nil
}

// writeStatus writes items with a merge patch of status on the main
// resource (the CRD has no status subresource, as upstream's), on the
// lister's resourceVersion: a conflict (the object changed meanwhile) is an
// error, and the retry decides again on the newer object.
func (c *Controller) writeStatus(ctx context.Context, e *egressipv1.EgressIP, items []egressipv1.EgressIPStatusItem, conds []metav1.Condition) error {
	patch, err := statusPatch(e.ResourceVersion, items, conds)
	if err != nil {
		return err
	}
	_, err = c.client.K8sV1().EgressIPs().Patch(ctx, e.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile: its delete event syncs again
	}
	return err
}

// FieldManager is the master's field manager of EgressIP status.
const FieldManager = "ovn-egress-egressip"

// statusPatch is the merge patch that sets status.items and
// status.conditions (all of them: a merge patch replaces a list whole) on
// the object at resourceVersion rv.
func statusPatch(rv string, items []egressipv1.EgressIPStatusItem, conds []metav1.Condition) ([]byte, error) {
	if items == nil {
		items = []egressipv1.EgressIPStatusItem{}
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": rv},
		"status":   map[string]any{"items": items, "conditions": conds},
	})
}

// eipConditions returns e's conditions for the assignment res and whether
// they differ from those it has. The CRD has no status subresource, so the
// write of status makes the next generation: whether anything changed is
// decided at e's generation, and what is written says the one after it
// (else each write would leave its conditions a generation behind, and be
// written again).
func eipConditions(e *egressipv1.EgressIP, res eipt.EgressIPResult, now time.Time) ([]metav1.Condition, bool) {
	items, problems := res.Items[e.Name], res.Problems.For(e.Name)
	probe := slices.Clone(e.Status.Conditions)
	changed := conditions.Set(&probe, conditions.EgressIP(e, items, problems, e.Generation), metav1.NewTime(now))
	out := slices.Clone(e.Status.Conditions)
	conditions.Set(&out, conditions.EgressIP(e, items, problems, e.Generation+1), metav1.NewTime(now))
	return out, changed
}

func itemsString(items []egressipv1.EgressIPStatusItem) string {
	var out []string
	for _, it := range items {
		out = append(out, it.EgressIP+"@"+it.Node)
	}
	return strings.Join(out, ",")
}
