package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/master"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

const catLeader = "Leader election"

func nbFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "nb-address", Usage: "OVN NB endpoints, comma-separated: unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT (all members of a RAFT cluster)", Category: catOVN, EnvVars: []string{"OVN_NB_DB"}},
		&cli.StringFlag{Name: "nb-private-key", Usage: "PEM private key for ssl: NB endpoints", Category: catOVN},
		&cli.StringFlag{Name: "nb-certificate", Usage: "PEM client certificate for ssl: NB endpoints", Category: catOVN},
		&cli.StringFlag{Name: "nb-ca-cert", Usage: "PEM CA certificate that signed the NB server's certificate", Category: catOVN},
		&cli.StringFlag{Name: "nb-server-name", Usage: "name expected in the NB server's certificate (default: the endpoint's host)", Category: catOVN},
		&cli.DurationFlag{Name: "nb-inactivity-probe", Value: 0, Usage: "echo the NB server after this much silence and reconnect when it does not answer within as long again (0: off; when set, a reconnect attempt is bounded by half of it)", Category: catOVN},
	}
}

func nbConfig(c *cli.Context) (ovn.ClientConfig, error) {
	if c.String("nb-address") == "" {
		return ovn.ClientConfig{}, fmt.Errorf("--nb-address is required")
	}
	addrs, err := ovn.ParseAddresses(c.String("nb-address"))
	if err != nil {
		return ovn.ClientConfig{}, fmt.Errorf("--nb-address: %w", err)
	}
	return ovn.ClientConfig{Addresses: addrs, PrivateKey: c.String("nb-private-key"), Certificate: c.String("nb-certificate"),
		CACert: c.String("nb-ca-cert"), ServerName: c.String("nb-server-name"), InactivityProbe: c.Duration("nb-inactivity-probe")}, nil
}

// translateFlags are shared by master, node (in a zone), translate and
// verify; names in except are left out (a command that defines its own).
func translateFlags(except ...string) []cli.Flag {
	d := translate.DefaultConfig()
	all := []cli.Flag{
		&cli.StringFlag{Name: "cluster-subnets", Usage: "pod networks, comma-separated (ovn-kubernetes --cluster-subnets; host prefixes are dropped) (default: the cluster's — ovn-kubernetes' ovn-config net_cidr — else " + prefixList(d.ClusterSubnets) + ")", Category: catXlate},
		&cli.StringFlag{Name: "join-subnets", Usage: "join-switch networks, comma-separated (default: ovn-kubernetes' 100.64.0.0/16 and fd98::/64 for the cluster's families)", Category: catXlate},
		&cli.StringFlag{Name: "service-cidrs", Usage: "service networks, comma-separated (default: the cluster's — ovn-config svc_cidr, else its ServiceCIDR objects — else " + prefixList(d.ServiceCIDRs) + ")", Category: catXlate},
		&cli.IntFlag{Name: "reroute-priority", Value: d.ReroutePriority, Usage: "priority of the reroute (and drop) policies", Category: catXlate},
		&cli.IntFlag{Name: "allow-priority", Value: d.AllowPriority, Usage: "priority of the allow policies that keep cluster, join, service and node traffic from being rerouted", Category: catXlate},
		&cli.StringFlag{Name: "snat-backend", Value: string(d.Backend), Usage: "where the SNAT to the load-balancer IP happens: host (node agent, nftables) or ovn (NAT rows on the host's gateway router)", Category: catXlate},
		&cli.StringFlag{Name: "unassigned-traffic", Value: string(d.UnassignedTraffic), Usage: "endpoints of LoadBalancerIP EgressServices without a working host: allow (leave with the node's address) or drop", Category: catXlate},
	}
	var out []cli.Flag
	for _, f := range all {
		if !slices.Contains(except, f.Names()[0]) {
			out = append(out, f)
		}
	}
	return out
}

func translateConfig(c *cli.Context) (translate.Config, error) {
	cfg := translate.DefaultConfig()
	cfg.ClusterSubnets, cfg.JoinSubnets, cfg.ServiceCIDRs = nil, nil, nil // given, or resolved (resolveNetworks)
	var err error
	for _, p := range []struct {
		flag string
		into *[]netip.Prefix
	}{{"cluster-subnets", &cfg.ClusterSubnets}, {"join-subnets", &cfg.JoinSubnets}, {"service-cidrs", &cfg.ServiceCIDRs}} {
		if *p.into, err = parsePrefixes(c.String(p.flag)); err != nil {
			return cfg, fmt.Errorf("--%s: %w", p.flag, err)
		}
	}
	cfg.ReroutePriority, cfg.AllowPriority = c.Int("reroute-priority"), c.Int("allow-priority")
	cfg.Backend = translate.Backend(c.String("snat-backend"))
	cfg.UnassignedTraffic = translate.UnassignedTraffic(c.String("unassigned-traffic"))
	return cfg, nil // validated by resolveNetworks, once the networks are known
}

func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		// ovn-kubernetes writes cluster subnets as CIDR/hostPrefix.
		if i := strings.LastIndex(f, "/"); i > 0 && strings.Count(f, "/") == 2 {
			f = f[:i]
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// selectFlags are host selection's health-check flags.
func selectFlags() []cli.Flag {
	d := selection.DefaultConfig()
	return []cli.Flag{
		&cli.IntFlag{Name: "health-check-port", Value: d.HealthCheckPort, Usage: "TCP port probed at each host's management-port addresses", Category: catSelect},
		&cli.DurationFlag{Name: "health-interval", Value: d.HealthInterval, Usage: "probe every host this often; a host that fails a probe is drained (0: no health checks)", Category: catSelect},
		&cli.DurationFlag{Name: "health-timeout", Value: d.HealthTimeout, Usage: "time one probe of one host may take", Category: catSelect},
		&cli.IntFlag{Name: "health-max-rate", Value: d.HealthMaxRate, Usage: "probes per second at most: with more hosts than --health-interval allows at this rate, each host is probed every hosts/rate seconds instead (0: no cap)", Category: catSelect},
		&cli.DurationFlag{Name: "health-hold-down", Value: d.HealthHoldDown, Usage: "a node that answers again after being unreachable is a host of last resort for this long (placed on only when no other node can host), so that a flapping node draws no services (0: none)", Category: catSelect},
		&cli.StringFlag{Name: "health-check-mode", Value: d.HealthCheckMode, Usage: "any: any answer, even a reset, means reachable (as ovn-kubernetes); connect: only an accepted connection (with the node agent's --health-listen)", Category: catSelect},
		&cli.DurationFlag{Name: "selector-move-damping", Value: d.SelectorMoveDamping, Usage: "after a change of an EgressService's spec.nodeSelector moved its host, a further selector change moves it only once this has passed (HostMoveDamped meanwhile): a flapping selector moves its host at most once per this; failures and node label changes are never damped (0: off)", Category: catSelect},
		&cli.IntFlag{Name: "max-services-per-node", Value: d.MaxPerNode, Usage: "give one node at most this many EgressServices (each is a label on its Node; a node past it keeps what it hosts); beyond, a service waits with NoEligibleNode (0: no cap)", Category: catSelect},
	}
}

func selectConfig(c *cli.Context) (selection.Config, error) {
	cfg := selection.DefaultConfig()
	if p := c.Int("health-check-port"); p < 1 || p > 65535 {
		return cfg, fmt.Errorf("--health-check-port: %d is not within 1..65535", p)
	}
	cfg.HealthCheckPort = c.Int("health-check-port")
	cfg.HealthInterval, cfg.HealthTimeout = c.Duration("health-interval"), c.Duration("health-timeout")
	if cfg.HealthHoldDown = c.Duration("health-hold-down"); cfg.HealthHoldDown < 0 {
		return cfg, fmt.Errorf("--health-hold-down must not be negative")
	}
	if cfg.HealthInterval > 0 && cfg.HealthTimeout <= 0 {
		return cfg, fmt.Errorf("--health-timeout must be positive")
	}
	if cfg.HealthMaxRate = c.Int("health-max-rate"); cfg.HealthMaxRate < 0 {
		return cfg, fmt.Errorf("--health-max-rate must not be negative")
	}
	cfg.HealthCheckMode = c.String("health-check-mode")
	if cfg.MaxPerNode = c.Int("max-services-per-node"); cfg.MaxPerNode < 0 {
		return cfg, fmt.Errorf("--max-services-per-node must not be negative")
	}
	if cfg.SelectorMoveDamping = c.Duration("selector-move-damping"); cfg.SelectorMoveDamping < 0 {
		return cfg, fmt.Errorf("--selector-move-damping must not be negative")
	}
	return cfg, nil
}

// reportNamespaceFlag names where the node agents keep their readiness
// reports (their own namespace).
func reportNamespaceFlag(cat string) cli.Flag {
	return &cli.StringFlag{Name: "report-namespace", Value: master.DefaultReportNamespace, Usage: "namespace of the node agents' readiness-report ConfigMaps (the agents' namespace)", Category: cat, EnvVars: []string{"POD_NAMESPACE"}}
}

// DefaultInstance names an install of the plain manifests (dist/): the
// chart's is its release's "namespace/name".
const DefaultInstance = "ovn-egress/ovn-egress"

func instanceFlag(cat string) cli.Flag {
	return &cli.StringFlag{Name: "instance", Value: DefaultInstance, Usage: "this install's name (\"namespace/release\"): it claims each NB it writes (NB_Global external_ids:" + ovn.InstanceKey + ") and writes nothing into an NB another install claimed (docs/operations.md#uninstalling)", Category: cat}
}

func masterCommand() *cli.Command {
	flags := append(kubeFlags(), nbFlags()...)
	flags = append(flags, translateFlags()...)
	flags = append(flags, selectFlags()...)
	flags = append(flags,
		&cli.StringFlag{Name: "mode", Value: master.ModeCentral, Usage: "central (one NB: select hosts and translate), ic (interconnect, one NB per zone: select hosts only; node agents run with --zone) or auto (detect from the nodes' annotations)", Category: catXlate},
		&cli.DurationFlag{Name: "nat-batch-window", Usage: "with --snat-backend=ovn: gather changes this long before each NB transaction (default: 1s on an NB without NAT.match, OVN < 24.09, where every NAT change costs ovn-northd a full recompute; none where NAT.match exists)", Category: catXlate},
		reportNamespaceFlag(catXlate),
		instanceFlag(catXlate),
		&cli.StringFlag{Name: "controllers", Usage: "controllers to run, comma-separated: selection (hosts, status.host, node labels, health probes), translation (NB rows; central mode only), status (the EgressServices' status.conditions) and egressip (EgressIP status.items and, beside translation, its NB rows; in interconnect the agents write them, --egressip; opt-in: it watches every pod) (default: selection, translation and status, as the mode has them)", Category: catXlate},
		&cli.DurationFlag{Name: "resync-interval", Value: 5 * time.Minute, Usage: "re-converge every key this often (0: never)", Category: catXlate},
		&cli.DurationFlag{Name: "status-hold", Value: coexist.DefaultHold, Usage: "a status.host written by a field manager not ovn-egress's (nor kubectl's) holds that EgressService this long: its host and node label are left as written (ovn-egress migrate --status --apply ends it)", Category: catSelect},
		&cli.DurationFlag{Name: "conflict-clear-after", Value: coexist.DefaultClearAfter, Usage: "resume only after a conflict with ovn-kubernetes' own features has been gone this long (its rows blink while it moves a host)", Category: catXlate},
		&cli.BoolFlag{Name: "leader-elect", Value: true, Usage: "run only while holding the Lease (several replicas: one active)", Category: catLeader},
		&cli.StringFlag{Name: "lease-namespace", Value: "ovn-egress", Usage: "namespace of the Lease", Category: catLeader, EnvVars: []string{"POD_NAMESPACE"}},
		&cli.StringFlag{Name: "lease-name", Value: "ovn-egress-master", Usage: "name of the Lease", Category: catLeader},
		&cli.StringFlag{Name: "lease-identity", Usage: "this replica's identity (default: hostname_pid)", Category: catLeader, EnvVars: []string{"POD_NAME"}},
		&cli.DurationFlag{Name: "lease-duration", Value: 15 * time.Second, Usage: "how long a standby waits before taking an unrenewed Lease", Category: catLeader},
		&cli.DurationFlag{Name: "renew-deadline", Value: 10 * time.Second, Usage: "how long the leader keeps trying to renew before giving up", Category: catLeader},
		&cli.DurationFlag{Name: "retry-period", Value: 2 * time.Second, Usage: "interval between Lease attempts", Category: catLeader},
	)
	flags = append(flags, observeFlags()...)
	flags = append(flags, loggingFlags()...)
	return &cli.Command{
		Name:  "master",
		Usage: "run the master: translate EgressServices into OVN NB rows keyed by their host",
		Flags: flags,
		Action: func(c *cli.Context) error {
			log, err := newLogger(c, "master")
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
			obs, err := startObserve(c, log)
			if err != nil {
				return err
			}
			cfg, err := masterConfig(c, func(tc *translate.Config) error {
				return resolveNetworks(c.Context, c, tc, kube, "master", obs.Registry(), log)
			})
			if err != nil {
				return err
			}
			cfg.Observe = obs
			m, err := master.New(c.Context, cfg, rc, log)
			if err != nil {
				return err
			}
			return m.Run(c.Context)
		},
	}
}

// masterConfig reads the master's flags; resolve completes the networks.
func masterConfig(c *cli.Context, resolve func(*translate.Config) error) (master.Config, error) {
	cfg := master.Config{Mode: c.String("mode"), ReportNamespace: c.String("report-namespace")}
	for _, n := range strings.Split(c.String("controllers"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.Controllers = append(cfg.Controllers, n)
		}
	}

	var err error
	if c.String("nb-address") != "" || cfg.Mode == master.ModeCentral {
		if cfg.NB, err = nbConfig(c); err != nil {
			return cfg, err
		}
	}
	if cfg.Translation.Translate, err = translateConfig(c); err != nil {
		return cfg, err
	}
	if err := resolve(&cfg.Translation.Translate); err != nil {
		return cfg, err
	}
	if cfg.Translation.Translate.Backend == translate.BackendOVN {
		cfg.Translation.BatchWindow = c.Duration("nat-batch-window")
		cfg.Translation.AutoBatchWindow = !c.IsSet("nat-batch-window")
	}
	cfg.Translation.ResyncInterval = c.Duration("resync-interval")
	cfg.StatusHold, cfg.ConflictClearAfter = c.Duration("status-hold"), c.Duration("conflict-clear-after")
	cfg.Instance = c.String("instance")
	if cfg.Select, err = selectConfig(c); err != nil {
		return cfg, err
	}
	cfg.LeaderElection = master.LeaderElection{
		Enabled: c.Bool("leader-elect"), Namespace: c.String("lease-namespace"), Name: c.String("lease-name"),
		Identity: c.String("lease-identity"), LeaseDuration: c.Duration("lease-duration"),
		RenewDeadline: c.Duration("renew-deadline"), RetryPeriod: c.Duration("retry-period"),
	}
	return cfg, cfg.Validate()
}
