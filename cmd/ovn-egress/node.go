package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/zone"
	"github.com/ovn-egress/ovn-egress/pkg/node"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

func nodeCommand() *cli.Command {
	d := node.DefaultConfig()
	flags := []cli.Flag{
		&cli.StringFlag{Name: "node-name", Usage: "the Node this agent runs on", Category: catNode, EnvVars: []string{"NODE_NAME"}, Required: true},
		reportNamespaceFlag(catNode),
		&cli.IntFlag{Name: "rule-priority", Value: d.RulePriority, Usage: "ip rule priority of the agent's rules in both families (not one of ovn-kubernetes': 2000, 5999, 6000, 6001)", Category: catNode},
		&cli.UintFlag{Name: "rule-protocol", Value: uint(d.RuleProtocol), Usage: "protocol value marking the agent's ip rules (1-255, not ovn-kubernetes' 84 or 85): it changes or deletes only rules that carry it", Category: catNode},
		&cli.DurationFlag{Name: "withdraw-grace", Value: d.WithdrawGrace, Usage: "wait after withdrawing a service from the readiness report before removing its SNAT and rules", Category: catNode},
		&cli.DurationFlag{Name: "withdrawn-hold", Value: d.WithdrawnHold, Usage: "after removing an endpoint's SNAT, drop its packets that would still leave the node unSNATed for this long (a reroute the master has not taken out yet; at least 1s)", Category: catNode},
		&cli.DurationFlag{Name: "resync-interval", Value: d.ResyncInterval, Usage: "re-apply the node plan this often (0 disables)", Category: catNode},
		&cli.BoolFlag{Name: "health-listen", Usage: "accept TCP connections on the node's management IPs at --health-check-port (for the master's connect probe)", Category: catNode},
		&cli.IntFlag{Name: "health-check-port", Value: d.HealthCheckPort, Usage: "port of the health listener", Category: catNode},
		&cli.StringFlag{Name: "rt-tables", Value: d.RTTables, Usage: "iproute2 table names, for networks that are not VRF devices", Category: catNode},
		&cli.StringFlag{Name: "cluster-subnets", Usage: "pod networks, comma-separated (as the master's): endpoints outside are host-networked and never configured, traffic to them is never SNATed (default: the cluster's, as the master finds them)", Category: catNode},
		&cli.StringFlag{Name: "mgmt-port", Value: d.MgmtPort, Usage: "management port; traffic out of it goes back into the cluster and is never SNATed", Category: catNode},
		&cli.BoolFlag{Name: "enable-forwarding", Value: d.EnableForwarding, Usage: "turn on IPv4/IPv6 forwarding for the families the node programs where it is off: IPv4 on the management port and egress interfaces only, IPv6 behind a forward guard (--enable-forwarding=false leaves the sysctls alone)", Category: catNode},
		&cli.StringFlag{Name: "netns", Usage: "run all netlink and nftables work in this named network namespace (tests, local e2e)", Category: catNode},
	}
	flags = append(flags, kubeFlags()...)
	flags = append(flags,
		&cli.StringFlag{Name: "zone", Usage: "interconnect: also translate the EgressServices into this zone's own NB (--nb-address, the node's local NB); the node's zone is its k8s.ovn.org/zone-name, else its name", Category: catOVN},
		instanceFlag(catOVN),
		&cli.DurationFlag{Name: "conflict-clear-after", Value: coexist.DefaultClearAfter, Usage: "with --zone: resume only after a conflict with ovn-kubernetes' own features has been gone this long from the zone's NB (its rows blink while it moves a host)", Category: catOVN},
		&cli.BoolFlag{Name: "egressip", Usage: "EgressIP (the master's egressip controller assigns the IPs): announce the IPv6 egress IPs this node holds (unsolicited neighbour advertisements) and, with --zone, write the zone's EgressIP rows (reroutes of its selected pods, SNATs of its egress nodes); needs the EgressIP CRD and read access to egressips (with --zone also pods and namespaces): the chart's egressIP.enabled", Category: catOVN})
	flags = append(flags, nbFlags()...)
	flags = append(flags, translateFlags("cluster-subnets")...)
	flags = append(flags, observeFlags()...)
	flags = append(flags, loggingFlags()...)
	return &cli.Command{
		Name:  "node",
		Usage: "run the node agent: SNAT and ip rules for the EgressServices hosted on this node, readiness report",
		Flags: flags,
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, "node")
			if err != nil {
				return err
			}
			cfg, err := nodeConfig(c)
			if err != nil {
				return err
			}
			rc, err := kubeConfig(c)
			if err != nil {
				return err
			}
			kube, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			egress, err := versioned.NewForConfig(rc)
			if err != nil {
				return fmt.Errorf("EgressService client: %w", err)
			}
			if cfg.Observe, err = startObserve(c, log); err != nil {
				return err
			}
			// The cluster's networks: the agent's (cluster subnets) and,
			// with --zone, its zone translation's.
			tc, err := translateConfig(c)
			if err == nil {
				err = resolveNetworks(c.Context, c, &tc, kube, "node", cfg.Observe.Registry(), log)
			}
			if err != nil {
				return err
			}
			cfg.ClusterSubnets = tc.ClusterSubnets
			if err := cfg.Validate(); err != nil {
				return err
			}
			// One set of worker metrics for the agent and its zone's translation.
			cfg.Work = controller.NewMetrics(cfg.Observe.Registry())
			var eip eipclient.Interface
			if cfg.EgressIP {
				if eip, err = eipclient.NewForConfig(rc); err != nil {
					return fmt.Errorf("EgressIP client: %w", err)
				}
			}
			if c.String("zone") == "" {
				return node.RunAgent(c.Context, cfg, kube, egress, eip, log)
			}
			zcfg, err := zoneConfig(c, tc)
			if err != nil {
				return err
			}
			zcfg.Observe, zcfg.Translation.Work = cfg.Observe, cfg.Work
			// Another install holding the zone's NB has its agent here too.
			relay := &coexist.Relay{}
			zcfg.Relay, cfg.ZoneClaim = relay, relay
			// One cache of each object for both: at 5,000 nodes an agent
			// holds the cluster's Services and EndpointSlices.
			shared := informer.NewShared(kube, egress)
			cfg.Informers = shared
			// The agent and its zone's translation run side by side; when one
			// stops, both do.
			ctx, cancel := context.WithCancel(c.Context)
			defer cancel()
			done := make(chan error, 2)
			go func() { done <- node.RunAgent(ctx, cfg, kube, egress, eip, log) }()
			clients := zone.Clients{Kube: kube, Egress: egress, EgressIP: eip, Informers: shared}
			go func() { done <- zone.Run(ctx, zcfg, clients, log.WithField("zone", zcfg.Translation.Zone)) }()
			first := <-done
			cancel()
			return errors.Join(first, <-done)
		},
	}
}

// zoneConfig reads the flags of a node agent's zone translation; tc is
// the translation's configuration, its networks resolved.
func zoneConfig(c *cli.Context, tc translate.Config) (zone.Config, error) {
	cfg := zone.Config{Node: c.String("node-name"), ReportNamespace: c.String("report-namespace"), EgressIP: c.Bool("egressip"),
		ConflictClearAfter: c.Duration("conflict-clear-after"), Instance: c.String("instance")}
	var err error
	if cfg.NB, err = nbConfig(c); err != nil {
		return cfg, err
	}
	cfg.Translation.Translate = tc
	cfg.Translation.Zone = c.String("zone")
	cfg.Translation.ResyncInterval = 5 * time.Minute
	return cfg, cfg.Translation.Validate()
}

func nodeConfig(c *cli.Context) (node.Config, error) {
	cfg := node.DefaultConfig()
	cfg.NodeName = c.String("node-name")
	cfg.ReportNamespace = c.String("report-namespace")
	cfg.RulePriority = c.Int("rule-priority")
	p := c.Uint("rule-protocol")
	if p > 255 {
		return cfg, fmt.Errorf("--rule-protocol %d: want 1-255", p)
	}
	cfg.RuleProtocol = uint8(p)
	cfg.WithdrawGrace = c.Duration("withdraw-grace")
	cfg.WithdrawnHold = c.Duration("withdrawn-hold")
	cfg.ResyncInterval = c.Duration("resync-interval")
	cfg.HealthListen = c.Bool("health-listen")
	cfg.HealthCheckPort = c.Int("health-check-port")
	cfg.RTTables = c.String("rt-tables")
	cfg.MgmtPort = c.String("mgmt-port")
	cfg.EnableForwarding = c.Bool("enable-forwarding")
	cfg.NetNS = c.String("netns")
	cfg.EgressIP = c.Bool("egressip")
	return cfg, nil // validated once the cluster subnets are resolved
}
