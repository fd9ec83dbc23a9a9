package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"net/netip"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/knftables"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	egressinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/informers/externalversions"
	egresslisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/listers/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// syncKey is the agent's one queue key. The node plan is a function of all
// services programmed on the node (one SNAT map, one rule priority, shared
// endpoints settled across services), so every event asks for the same
// node-wide sync; the queue coalesces bursts into one.
const syncKey = "node"

// Deps are the agent's collaborators: real ones from NewAgent, fakes in
// tests.
type Deps struct {
	Kube      kubernetes.Interface
	Egress    versioned.Interface
	Namespace *Namespace
	Applier   *Applier
	Resolver  *TableResolver
	// Netlink is read for network diagnostics (routes of the tables used).
	Netlink  Netlink
	Recorder record.EventRecorder
	// Work, when set, instruments the worker; Metrics, the agent.
	Work    *controller.Metrics
	Metrics *Metrics
	// OVNKube, when set, reads ovn-kubernetes' nftables table (inet
	// ovn-kubernetes) in the namespace: while its egress-service chain is
	// there the agent stands back (standingBack).
	OVNKube knftables.Interface
}

// Controller is the node agent: informers → one key → sync (gather →
// translate.NodePlan → apply → publish the readiness report).
type Controller struct {
	cfg Config
	log *logrus.Entry
	d   Deps

	kubeInformers informers.SharedInformerFactory
	nodeInformers informers.SharedInformerFactory
	// allNodes caches every Node with only its addresses (host-cidrs and
	// status.addresses): the node IPs the SNAT leaves alone.
	allNodes        informers.SharedInformerFactory
	nodeIPsLst      corelisters.NodeLister
	egressInformers egressinformers.SharedInformerFactory
	esLister        egresslisters.EgressServiceLister
	svcLister       corelisters.ServiceLister
	sliceIndex      cache.Indexer // EndpointSlices by controller.IndexByService
	nodeLister      corelisters.NodeLister
	// reportInformers cache the agent's own report ConfigMaps.
	reportInformers informers.SharedInformerFactory
	reportLister    corelisters.ConfigMapNamespaceLister
	synced          []cache.InformerSynced

	work   *controller.Worker[string]
	health *HealthListener
	// nodeChanged wakes the health listener when the Node changes.
	nodeChanged chan struct{}

	// Kept between syncs by the single worker only.
	report   map[int]partWrite
	problems map[translate.Problem]bool
	routes   map[tableFamily]bool
	// nodeProblems are the unreadable annotations of this node last
	// reported (an Event on the Node when they change).
	nodeProblems string
	// standoff names ovn-kubernetes' egress-service objects found in the
	// last sync ("" when none: the agent writes).
	standoff string
	// otherInstance is the other install that holds this node's zone NB
	// (Config.ZoneClaim), while the agent stands back for it.
	otherInstance string
}

// NewController wires informers and handlers; Run starts them.
func NewController(cfg Config, d Deps, log *logrus.Entry) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node agent config: %w", err)
	}
	if d.Kube == nil || d.Egress == nil || d.Namespace == nil || d.Applier == nil || d.Resolver == nil || d.Netlink == nil || d.Recorder == nil {
		return nil, fmt.Errorf("node agent: missing dependencies")
	}
	c := &Controller{cfg: cfg, log: log, d: d, nodeChanged: make(chan struct{}, 1),
		problems: map[translate.Problem]bool{}, routes: map[tableFamily]bool{}, report: map[int]partWrite{}}
	// A failed node sync is retried soon (the kernel or nft refused one
	// batch) and backs off to 30 s; 20/s overall caps a flapping input.
	c.work = controller.New(controller.Config[string]{Name: "node",
		RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, 30*time.Second),
			&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(20), 50)}),
		Metrics: d.Work,
	}, func(ctx context.Context, _ []string) error { return c.sync(ctx) }, log)

	if cfg.ZoneClaim != nil {
		cfg.ZoneClaim.Subscribe(func() { c.work.Add(syncKey) })
	}
	shared := cfg.Informers
	if shared == nil {
		shared = informer.NewShared(d.Kube, d.Egress)
	}
	c.kubeInformers = shared.Kube
	c.nodeInformers = informer.Kube(d.Kube, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
	}))
	c.egressInformers = shared.Egress
	c.reportInformers = informer.OwnReport(d.Kube, cfg.ReportNamespace, cfg.NodeName)
	c.allNodes = informers.NewSharedInformerFactoryWithOptions(d.Kube, 0, informers.WithTransform(nodeAddressesOnly))

	es := c.egressInformers.K8s().V1().EgressServices()
	svc := c.kubeInformers.Core().V1().Services()
	slices := c.kubeInformers.Discovery().V1().EndpointSlices()
	nodes := c.nodeInformers.Core().V1().Nodes()
	allNodeInf := c.allNodes.Core().V1().Nodes()
	c.esLister, c.svcLister, c.sliceIndex, c.nodeLister = es.Lister(), svc.Lister(), slices.Informer().GetIndexer(), nodes.Lister()
	// A service's slices by index: listing the namespace's per service was
	// quadratic (a 5,000-service sync took 1.7 s, 10,000 about 7 s).
	if err := controller.AddIndexers(slices.Informer(), controller.IndexByService); err != nil {
		return nil, fmt.Errorf("endpointslice indexer: %w", err)
	}
	c.nodeIPsLst = allNodeInf.Lister()
	reports := c.reportInformers.Core().V1().ConfigMaps()
	c.reportLister = reports.Lister().ConfigMaps(cfg.ReportNamespace)

	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{es.Informer(), controller.OnChange(c.onEgressService)},
		{svc.Informer(), controller.OnObject(c.onService)},
		{slices.Informer(), controller.OnObject(c.onEndpointSlice)},
		{nodes.Informer(), controller.OnChange(c.onNode)},
		{reports.Informer(), controller.OnChange(func(o, n any) {
			// A report someone else changed (or deleted) is rewritten.
			oc, ok1 := o.(*corev1.ConfigMap)
			nc, ok2 := n.(*corev1.ConfigMap)
			if !ok1 || !ok2 || oc.Data[translate.ReportDataKey] != nc.Data[translate.ReportDataKey] {
				c.enqueue()
			}
		})},
		{allNodeInf.Informer(), controller.OnChange(func(o, n any) {
			if o == nil || n == nil || !sameAddresses(o, n) {
				c.enqueue()
			}
		})},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return nil, fmt.Errorf("add event handler: %w", err)
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}
	err := d.Metrics.collectDrops(func(ctx context.Context) (n GuardDrops, err error) {
		nsErr := d.Namespace.Do(func() error { n, err = d.Applier.GuardDrops(ctx); return nil })
		return n, errors.Join(nsErr, err)
	})
	if err != nil {
		return nil, fmt.Errorf("leak guard metric: %w", err)
	}
	if cfg.HealthListen {
		c.health = NewHealthListener(d.Namespace, cfg.HealthCheckPort, log.WithField("subsys", "health"))
	}
	return c, nil
}

// Run starts the informers, waits for them to sync, then runs the worker,
// the periodic resync and the health listener until ctx ends. Pruning of
// stale owned state happens only in syncs, so only after the caches synced.
func (c *Controller) Run(ctx context.Context) error {
	c.kubeInformers.Start(ctx.Done())
	c.nodeInformers.Start(ctx.Done())
	c.allNodes.Start(ctx.Done())
	defer c.allNodes.Shutdown()
	c.egressInformers.Start(ctx.Done())
	c.reportInformers.Start(ctx.Done())
	defer c.reportInformers.Shutdown()
	defer c.kubeInformers.Shutdown()
	defer c.nodeInformers.Shutdown()
	defer c.egressInformers.Shutdown()
	c.log.Info("waiting for informer caches")
	if err := controller.WaitSynced(ctx, c.synced...); err != nil {
		return err
	}
	c.log.Info("caches synced; node agent running")
	c.enqueue()
	if c.cfg.ResyncInterval > 0 {
		go c.resyncLoop(ctx)
	}
	if c.health != nil {
		go c.healthLoop(ctx)
	}
	c.work.Run(ctx)
	return nil
}

func (c *Controller) resyncLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.ResyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.enqueue()
		}
	}
}

func (c *Controller) enqueue() { c.work.Add(syncKey) }

// onEgressService enqueues when the service is (or was) programmed here.
func (c *Controller) onEgressService(old, obj any) {
	es, _ := obj.(*egressv1.EgressService)
	prev, _ := old.(*egressv1.EgressService)
	if translate.ConditionsOnly(prev, es) {
		return // the master's status controller's write: nothing the plan reads
	}
	if nodeplan.HostedOn(es, c.cfg.NodeName) || nodeplan.HostedOn(prev, c.cfg.NodeName) {
		c.enqueue()
	}
}

func (c *Controller) onService(obj any) {
	if s, ok := obj.(*corev1.Service); ok {
		c.enqueueIfHosted(s.Namespace, s.Name)
	}
}

func (c *Controller) onEndpointSlice(obj any) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			c.enqueueIfHosted(s.Namespace, name)
		}
	}
}

// enqueueIfHosted enqueues when the EgressService of that name exists and
// is programmed on this node; other Services and slices are not ours.
func (c *Controller) enqueueIfHosted(ns, name string) {
	es, err := c.esLister.EgressServices(ns).Get(name)
	if err == nil && nodeplan.HostedOn(es, c.cfg.NodeName) {
		c.enqueue()
	}
}

// onNode reacts to changes of the agent's own Node: a report someone else
// changed is rewritten by a sync; new management IPs move the health
// listener.
func (c *Controller) onNode(old, obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	var oldAnn map[string]string
	if o, ok := old.(*corev1.Node); ok {
		oldAnn = o.Annotations
	}
	subnets := oldAnn == nil || oldAnn[translate.AnnotNodeSubnets] != n.Annotations[translate.AnnotNodeSubnets]
	// The subnets tell pod endpoints outside --cluster-subnets; any
	// ovn-kubernetes annotation may become (un)readable (an Event).
	if subnets || oldAnn[translate.ReportAnnotation] != n.Annotations[translate.ReportAnnotation] ||
		ovnAnnotationsChanged(oldAnn, n.Annotations) {
		c.enqueue()
	}
	if subnets {
		select {
		case c.nodeChanged <- struct{}{}:
		default:
		}
	}
}

// ovnAnnotationsChanged tells whether an ovn-kubernetes annotation that
// translate.ParseNode reads was added, removed or changed.
func ovnAnnotationsChanged(old, now map[string]string) bool {
	for _, k := range translate.NodeAnnotations {
		v, ok := old[k]
		w, ok2 := now[k]
		if ok != ok2 || v != w {
			return true
		}
	}
	return false
}

// nodeAddressesOnly keeps of a Node what the node-IP list needs: its name,
// the host-cidrs annotation and status.addresses (a cache of every Node in
// the cluster stays small).
func nodeAddressesOnly(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
	if v, ok := n.Annotations[translate.AnnotHostCIDRs]; ok {
		out.Annotations = map[string]string{translate.AnnotHostCIDRs: v}
	}
	out.Status.Addresses = n.Status.Addresses
	return out, nil
}

func sameAddresses(o, n any) bool {
	a, ok1 := o.(*corev1.Node)
	b, ok2 := n.(*corev1.Node)
	return ok1 && ok2 && a.Annotations[translate.AnnotHostCIDRs] == b.Annotations[translate.AnnotHostCIDRs] &&
		slices.Equal(a.Status.Addresses, b.Status.Addresses)
}

// healthLoop keeps the health listener on the management IPs of the Node
// (the .2 of each subnet in k8s.ovn.org/node-subnets).
func (c *Controller) healthLoop(ctx context.Context) {
	defer c.health.Close()
	retry := time.NewTicker(10 * time.Second)
	defer retry.Stop()
	ensure := func() {
		n, err := c.nodeLister.Get(c.cfg.NodeName)
		if err != nil {
			c.log.WithError(err).Warn("health listener: own Node not found")
			return
		}
		info := translate.ParseNode(n, nil)
		ips := make([]netip.Addr, 0, len(info.MgmtIPs))
		for _, ip := range info.MgmtIPs {
			ips = append(ips, ip)
		}
		if err := c.health.Ensure(ips); err != nil {
			c.log.WithError(err).Warn("health listener")
		}
	}
	ensure()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.nodeChanged:
			ensure()
		case <-retry.C:
			ensure()
		}
	}
}

// checks installs the agent's readiness (informers synced, syncs not
// failing for longer than FailingBound) and liveness (no sync stuck) on
// obs.
func (c *Controller) checks(obs *observe.Server) {
	if obs == nil {
		return
	}
	obs.Ready("node", func() error {
		if !controller.Synced(c.synced) {
			return errors.New("informer caches not synced")
		}
		if c.cfg.FailingBound > 0 {
			return c.work.Failing(c.cfg.FailingBound)
		}
		return nil
	})
	// The withdraw grace is spent inside a sync.
	obs.Live("node", func() error { return c.work.Stuck(controller.StuckBound + c.cfg.WithdrawGrace) })
}
