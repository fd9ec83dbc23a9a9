package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/knftables"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
)

// RunAgent builds the node agent's real collaborators — the network
// namespace, netlink, knftables (bound to `inet ovn-egress`), /proc/sys,
// the table resolver and an Event recorder — and runs it until ctx ends.
func RunAgent(ctx context.Context, cfg Config, kube kubernetes.Interface, egress versioned.Interface, log *logrus.Entry) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("node agent config: %w", err)
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
	var nft knftables.Interface
	if err := ns.Do(func() (err error) {
		nft, err = knftables.New(knftables.InetFamily, TableName)
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
		Resolver: NewTableResolver(nl, cfg.RTTables), Netlink: nl, Recorder: rec, Work: cfg.Work}
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
		"table": "inet " + TableName}).Info("starting node agent")
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
