package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/knftables"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
)

// RunAgent builds the node agent's real collaborators — the network
// namespace, netlink, knftables (bound to `inet ovn-egress`), /proc/sys,
// the table resolver and an Event recorder — and runs it until ctx ends;
// with cfg.EgressIP (eip set) the Announcer runs beside it.
func RunAgent(ctx context.Context, cfg Config, kube kubernetes.Interface, egress versioned.Interface, eip eipclient.Interface, log *logrus.Entry) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("node agent config: %w", err)
	}
	if cfg.EgressIP && eip == nil {
		return errors.New("node agent: announcing EgressIPs needs the EgressIP client")
	}
	ns, err := OpenNamespace(cfg.NetNS)
	if err != nil {
		return err
	}
	defer ns.Close()
	nl, err := NewKernelNetlink(ns)
	if err != nil {
		return err
	}
	var nft, ovnkube knftables.Interface
	if err := ns.Do(func() (err error) {
		if nft, err = knftables.New(knftables.InetFamily, TableName); err != nil {
			return err
		}
		ovnkube, err = knftables.New(knftables.InetFamily, OVNKubeTable)
		return err
	}); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	applier, err := NewApplier(cfg.applierConfig(), nl, nft, NewProcSysctl(), log.WithField("subsys", "applier"))
	if err != nil {
		return err
	}
	applier.ReadTableWith(TableReader{})
	rec, stop, err := controller.NewRecorder(ctx, kube, corev1.EventSource{Component: EventSource, Host: cfg.NodeName})
	if err != nil {
		return err
	}
	defer stop()
	d := Deps{Kube: kube, Egress: egress, Namespace: ns, Applier: applier,
		Resolver: NewTableResolver(nl, cfg.RTTables), Netlink: nl, Recorder: rec, Work: cfg.Work, OVNKube: ovnkube}
	if cfg.Observe != nil {
		cfg.Observe.Ready("node", func() error { return errors.New("starting") })
		d.Metrics = NewMetrics(cfg.Observe.Registry())
	}
	c, err := NewController(cfg, d, log)
	if err != nil {
		return err
	}
	c.checks(cfg.Observe)
	log.WithFields(logrus.Fields{"node": cfg.NodeName, "netns": cfg.NetNS, "priority": cfg.RulePriority,
		"table": "inet " + TableName, "egressip": cfg.EgressIP}).Info("starting node agent")
	if !cfg.EgressIP {
		return ignoreCanceled(c.Run(ctx))
	}
	var reg prometheus.Registerer
	if cfg.Observe != nil {
		reg = cfg.Observe.Registry()
	}
	a, err := NewAnnouncer(cfg.NodeName, ns, kube, eip, reg, cfg.Work, log.WithField("subsys", "announce"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	err = c.Run(ctx)
	cancel()
	return errors.Join(ignoreCanceled(err), ignoreCanceled(<-done))
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
