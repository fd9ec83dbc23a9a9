package node

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	eiplisters "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/listers/egressip/v1"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// announceGaps are the waits before each unsolicited neighbour
// advertisement of an IPv6 egress IP this node starts holding: three, at
// 0, 1 and 3 s, so that one lost on the wire is not the only one.
var announceGaps = []time.Duration{0, time.Second, 2 * time.Second}

// Announcer announces the IPv6 EgressIPs this node holds. OVN announces a
// moved IPv4 NAT address itself (gratuitous ARPs from the gateway router's
// nat-addresses=router) but no IPv6 one, so without this the outside keeps
// sending the replies to the old node's MAC until its neighbour
// unreachability detection gives up (23 s measured). When an IPv6 item of
// an EgressIP's status.items names this node — a new assignment, a
// failover onto it, or the agent starting — it sends unsolicited neighbour
// advertisements (announceGaps) out of the interface on the node's
// primary network, with its gateway router's MAC (k8s.ovn.org/l3-gateway-config).
type Announcer struct {
	node   string
	ns     *Namespace
	log    *logrus.Entry
	work   *controller.Worker[string]
	eipInf interface {
		Start(<-chan struct{})
		Shutdown()
	}
	nodeInf informers.SharedInformerFactory
	eips    eiplisters.EgressIPLister
	nodes   corelisters.NodeLister
	synced  []cache.InformerSynced
	sent    *prometheus.CounterVec // nil: not counted
	send    func(dev string, ip netip.Addr, mac net.HardwareAddr) error

	mu      sync.Mutex
	ctx     context.Context // Run's
	bursts  map[netip.Addr]context.CancelFunc
	refused map[netip.Addr]string // held here but never announced, and why
}

// NewAnnouncer wires the announcer of node's IPv6 egress IPs; reg, when
// set, gets its counter.
func NewAnnouncer(node string, ns *Namespace, kube kubernetes.Interface, eip eipclient.Interface, reg prometheus.Registerer, work *controller.Metrics, log *logrus.Entry) (*Announcer, error) {
	a := &Announcer{node: node, ns: ns, log: log, bursts: map[netip.Addr]context.CancelFunc{}, refused: map[netip.Addr]string{},
		send: sendNeighborAdvertisement}
	eipInf := informer.EgressIP(eip)
	a.eipInf = eipInf
	a.nodeInf = informer.Kube(kube, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	eips, nodes := eipInf.K8s().V1().EgressIPs(), a.nodeInf.Core().V1().Nodes()
	a.eips, a.nodes = eips.Lister(), nodes.Lister()
	a.synced = []cache.InformerSynced{eips.Informer().HasSynced, nodes.Informer().HasSynced}
	a.work = controller.New(controller.Config[string]{Name: "announce", Metrics: work}, a.sync, log)
	enqueue := controller.OnChange(func(_, _ any) { a.work.Add(syncKey) })
	for _, inf := range []cache.SharedIndexInformer{eips.Informer(), nodes.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return nil, fmt.Errorf("announcer handler: %w", err)
		}
	}
	if reg != nil {
		a.sent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovn_egress_node_neighbor_advertisements_total",
			Help: "Unsolicited neighbour advertisements for the IPv6 egress IPs this node holds, by result (sent, failed; refused: an IP this node must not announce, counted once per IP)."}, []string{"result"})
		reg.MustRegister(a.sent)
	}
	return a, nil
}

// Run announces until ctx ends.
func (a *Announcer) Run(ctx context.Context) error {
	a.mu.Lock()
	a.ctx = ctx
	a.mu.Unlock()
	a.eipInf.Start(ctx.Done())
	a.nodeInf.Start(ctx.Done())
	defer a.eipInf.Shutdown()
	defer a.nodeInf.Shutdown()
	if err := controller.WaitSynced(ctx, a.synced...); err != nil {
		return err
	}
	a.work.Add(syncKey)
	a.work.Run(ctx)
	return nil
}

// sync starts a burst for every IPv6 egress IP newly held here and stops
// those of the IPs no longer held.
func (a *Announcer) sync(_ context.Context, _ []string) error {
	list, err := a.eips.List(labels.Everything())
	if err != nil {
		return err
	}
	held := HeldIPv6(a.node, list)
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip, stop := range a.bursts {
		if !slices.Contains(held, ip) {
			stop()
			delete(a.bursts, ip)
		}
	}
	for ip := range a.refused {
		if !slices.Contains(held, ip) {
			delete(a.refused, ip)
		}
	}
	var candidates []netip.Addr
	for _, ip := range held {
		if _, ok := a.bursts[ip]; !ok {
			candidates = append(candidates, ip)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	n, err := a.nodes.Get(a.node)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil // its Node's arrival enqueues again
		}
		return err
	}
	start := a.announceable(n, candidates)
	if len(start) == 0 {
		return nil
	}
	dev, mac, err := a.where(n)
	if err != nil {
		return err // retried with backoff: nothing recorded as announced
	}
	for _, ip := range start {
		ctx, cancel := context.WithCancel(a.ctx)
		a.bursts[ip] = cancel
		go a.burst(ctx, dev, ip, mac)
	}
	return nil
}

// announceable keeps the IPs this node may announce as its own; the
// others (a status item the master would never write: a gateway, a
// neighbour's or a network's address, one outside the node's networks)
// are logged and counted once each, and checked again at every sync (the
// Node's networks may change). Called with a.mu held.
func (a *Announcer) announceable(n *corev1.Node, ips []netip.Addr) []netip.Addr {
	facts := egressip.ParseEgressIPNode(n, true)
	var out []netip.Addr
	for _, ip := range ips {
		why := facts.AnnounceRefusal(ip)
		if why == "" {
			delete(a.refused, ip)
			out = append(out, ip)
			continue
		}
		if a.refused[ip] != why {
			a.log.WithField("ip", ip).Warnf("egress IP %s %s: not announced", ip, why)
			if a.sent != nil {
				a.sent.WithLabelValues("refused").Inc()
			}
		}
		a.refused[ip] = why
	}
	return out
}

// burst sends the advertisements of one IP until they are done or the IP
// leaves this node.
func (a *Announcer) burst(ctx context.Context, dev string, ip netip.Addr, mac net.HardwareAddr) {
	for _, gap := range announceGaps {
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		err := a.ns.Do(func() error { return a.send(dev, ip, mac) })
		result := "sent"
		if err != nil {
			result = "failed"
			a.log.WithError(err).WithField("ip", ip).Warn("unsolicited neighbour advertisement")
		} else {
			a.log.WithFields(logrus.Fields{"ip": ip, "dev": dev, "mac": mac}).Debug("unsolicited neighbour advertisement sent")
		}
		if a.sent != nil {
			a.sent.WithLabelValues(result).Inc()
		}
	}
}

// where finds the interface on the node's primary network and the MAC its
// gateway router answers with.
func (a *Announcer) where(n *corev1.Node) (string, net.HardwareAddr, error) {
	primary, mac := GatewayFacts(n)
	if !primary.IsValid() {
		return "", nil, fmt.Errorf("node %s has no primary address (%s)", n.Name, translate.AnnotPrimaryIfAddr)
	}
	var dev string
	err := a.ns.Do(func() (err error) {
		dev, err = interfaceOn(primary)
		if err == nil && mac == nil {
			var ifi *net.Interface
			if ifi, err = net.InterfaceByName(dev); err == nil {
				mac = ifi.HardwareAddr
			}
		}
		return err
	})
	return dev, mac, err
}

// HeldIPv6 returns the IPv6 egress IPs of eips' status.items on node,
// sorted.
func HeldIPv6(node string, eips []*egressipv1.EgressIP) []netip.Addr {
	var out []netip.Addr
	for _, e := range eips {
		for _, it := range e.Status.Items {
			ip, err := netip.ParseAddr(it.EgressIP)
			if it.Node == node && err == nil && ip.Is6() && !ip.Is4In6() && ip.Zone() == "" {
				out = append(out, ip)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}

// GatewayFacts reads a Node's primary address and network
// (node-primary-ifaddr, IPv6 first) and its gateway router's MAC
// (l3-gateway-config, nil when absent).
func GatewayFacts(n *corev1.Node) (netip.Prefix, net.HardwareAddr) {
	var primary netip.Prefix
	var ifaddr map[string]string
	if json.Unmarshal([]byte(n.Annotations[translate.AnnotPrimaryIfAddr]), &ifaddr) == nil {
		for _, k := range []string{"ipv6", "ipv4"} {
			if p, err := netip.ParsePrefix(ifaddr[k]); err == nil {
				primary = p
				break
			}
		}
	}
	return primary, translate.ParseNode(n, nil).GatewayMAC
}
