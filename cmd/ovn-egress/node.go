package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/node"
)

func nodeCommand() *cli.Command {
	d := node.DefaultConfig()
	flags := []cli.Flag{
		&cli.StringFlag{Name: "node-name", Usage: "the Node this agent runs on", Category: catNode, EnvVars: []string{"NODE_NAME"}, Required: true},
		&cli.IntFlag{Name: "rule-priority", Value: d.RulePriority, Usage: "ip rule priority the agent owns in both families (every rule there is its own)", Category: catNode},
		&cli.DurationFlag{Name: "withdraw-grace", Value: d.WithdrawGrace, Usage: "wait after withdrawing a service from the readiness report before removing its SNAT and rules", Category: catNode},
		&cli.DurationFlag{Name: "resync-interval", Value: d.ResyncInterval, Usage: "re-apply the node plan this often (0 disables)", Category: catNode},
		&cli.BoolFlag{Name: "health-listen", Usage: "accept TCP connections on the node's management IPs at --health-check-port (for the master's connect probe)", Category: catNode},
		&cli.IntFlag{Name: "health-check-port", Value: d.HealthCheckPort, Usage: "port of the health listener", Category: catNode},
		&cli.StringFlag{Name: "rt-tables", Value: d.RTTables, Usage: "iproute2 table names, for networks that are not VRF devices", Category: catNode},
		&cli.StringFlag{Name: "cluster-subnets", Value: prefixList(d.ClusterSubnets), Usage: "pod networks, comma-separated (as the master's): endpoints outside are host-networked and never configured, traffic to them is never SNATed", Category: catNode},
		&cli.StringFlag{Name: "mgmt-port", Value: d.MgmtPort, Usage: "management port; traffic out of it goes back into the cluster and is never SNATed", Category: catNode},
		&cli.BoolFlag{Name: "enable-forwarding", Value: d.EnableForwarding, Usage: "turn on IPv4/IPv6 forwarding for the families the node programs (--enable-forwarding=false leaves the sysctls alone)", Category: catNode},
		&cli.StringFlag{Name: "netns", Usage: "run all netlink and nftables work in this named network namespace (tests, local e2e)", Category: catNode},
	}
	flags = append(flags, kubeFlags()...)
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
			return node.RunAgent(c.Context, cfg, kube, egress, log)
		},
	}
}

func nodeConfig(c *cli.Context) (node.Config, error) {
	cfg := node.DefaultConfig()
	cfg.NodeName = c.String("node-name")
	cfg.RulePriority = c.Int("rule-priority")
	cfg.WithdrawGrace = c.Duration("withdraw-grace")
	cfg.ResyncInterval = c.Duration("resync-interval")
	cfg.HealthListen = c.Bool("health-listen")
	cfg.HealthCheckPort = c.Int("health-check-port")
	cfg.RTTables = c.String("rt-tables")
	cfg.MgmtPort = c.String("mgmt-port")
	cfg.EnableForwarding = c.Bool("enable-forwarding")
	cfg.NetNS = c.String("netns")
	var err error
	if cfg.ClusterSubnets, err = parsePrefixes(c.String("cluster-subnets")); err != nil {
		return cfg, fmt.Errorf("--cluster-subnets: %w", err)
	}
	return cfg, cfg.Validate()
}
