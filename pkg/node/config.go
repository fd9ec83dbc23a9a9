package node

import (
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"net/netip"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/observe"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Config is the node agent's configuration (flags of `ovn-egress node`).
type Config struct {
	// NodeName is the Node this agent runs on.
	NodeName string
	// ReportNamespace holds the agent's readiness-report ConfigMap (the
	// agents' namespace; the master reads it there).
	ReportNamespace string
	// RulePriority is the ip rule priority of the agent's rules (5000).
	RulePriority int
	// RuleProtocol marks the agent's ip rules (97): only rules carrying it
	// are the agent's to change or delete.
	RuleProtocol uint8
	// WithdrawGrace is how long the agent waits after withdrawing a
	// service from its readiness report before it removes the SNAT and
	// rules behind it, so the master takes the endpoints out of the
	// reroute first.
	WithdrawGrace time.Duration
	// FailingBound is how long the node's syncs may keep failing before
	// the agent's /readyz says so (the pod shows NotReady; nothing else
	// changes: what the kernel holds stays).
	FailingBound time.Duration
	// WithdrawnHold is how long, after the agent removed an endpoint's SNAT,
	// the leak guard still drops that endpoint's unSNATed packets (a
	// reroute the master could not take out yet, as in an NB outage, would
	// otherwise take them out with the pod address).
	WithdrawnHold time.Duration
	// ResyncInterval re-applies the plan periodically (repairing drift made
	// behind the agent's back); 0 disables it.
	ResyncInterval time.Duration
	// HealthListen accepts TCP connections on the node's management IPs at
	// HealthCheckPort, for the master's connect-mode probe.
	HealthListen    bool
	HealthCheckPort int
	// RTTables is iproute2's table-name file, read to resolve network names
	// that are not VRF devices.
	RTTables string
	// ClusterSubnets are the pod subnets: endpoints outside them (host
	// networked) are never configured, traffic to them is never SNATed.
	ClusterSubnets []netip.Prefix
	// MgmtPort is the management port's name (ovn-k8s-mp0).
	MgmtPort string
	// EnableForwarding turns IPv4/IPv6 forwarding on for the host path when
	// the plan needs it, keeping the node's other interfaces unforwarded.
	EnableForwarding bool
	// NetNS runs all netlink and nft work in this named network namespace
	// ("" = the host's): one agent per "node" namespace in tests.
	NetNS string
	// Observe, when set, gets the agent's metrics and health checks; Work
	// instruments its worker (shared with a zone translation in the same
	// process).
	Observe *observe.Server
	Work    *controller.Metrics
	// EgressIP announces the IPv6 EgressIPs this node holds (Announcer).
	EgressIP bool
	// ZoneClaim, when set (interconnect: the zone translation beside the
	// agent), says when another install of ovn-egress holds this node's
	// zone NB: its agent is on this node too, and the agent stands back.
	ZoneClaim ZoneClaim
	// Informers, when set, are the factories of Services, EndpointSlices,
	// Nodes and EgressServices shared with the zone translation beside the
	// agent (one cache of each object in the process); otherwise the agent
	// makes its own.
	Informers *informer.Shared
}

// ZoneClaim tells the agent which other install holds its zone's NB
// (coexist.Relay).
type ZoneClaim interface {
	// ForeignInstance is the other install ("" when this one holds it).
	ForeignInstance() string
	// Subscribe calls f after every change of ForeignInstance.
	Subscribe(f func())
}

// DefaultConfig returns the defaults of every flag.
func DefaultConfig() Config {
	return Config{
		ReportNamespace:  "ovn-egress",
		RulePriority:     nodeplan.DefaultRulePriority,
		RuleProtocol:     DefaultRuleProtocol,
		WithdrawGrace:    2 * time.Second,
		FailingBound:     time.Minute,
		WithdrawnHold:    WithdrawnHold,
		ResyncInterval:   time.Minute,
		HealthCheckPort:  9,
		RTTables:         "/etc/iproute2/rt_tables",
		ClusterSubnets:   []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		MgmtPort:         "ovn-k8s-mp0",
		EnableForwarding: true,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is empty"))
	} else if _, err := translate.ReportConfigMapName(c.NodeName); err != nil {
		errs = append(errs, err)
	}
	if c.ReportNamespace == "" {
		errs = append(errs, errors.New("report namespace is empty"))
	}
	if c.WithdrawGrace < 0 {
		errs = append(errs, fmt.Errorf("withdraw grace %v is negative", c.WithdrawGrace))
	}
	if c.ResyncInterval < 0 {
		errs = append(errs, fmt.Errorf("resync interval %v is negative", c.ResyncInterval))
	}
	if c.HealthCheckPort <= 0 || c.HealthCheckPort > 65535 {
		errs = append(errs, fmt.Errorf("health check port %d: want 1..65535", c.HealthCheckPort))
	}
	if len(c.ClusterSubnets) == 0 {
		errs = append(errs, errors.New("no cluster subnets"))
	}
	for _, p := range c.ClusterSubnets {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("invalid cluster subnet %v", p))
		}
	}
	if c.RTTables == "" {
		errs = append(errs, errors.New("rt_tables path is empty"))
	}
	errs = append(errs, c.applierConfig().Validate())
	return errors.Join(errs...)
}

func (c Config) applierConfig() ApplierConfig {
	return ApplierConfig{RulePriority: c.RulePriority, RuleProtocol: c.RuleProtocol, MgmtPort: c.MgmtPort,
		EnableForwarding: c.EnableForwarding, WithdrawnHold: c.WithdrawnHold}
}

func (c Config) planConfig() nodeplan.NodePlanConfig {
	pc := nodeplan.DefaultNodePlanConfig()
	pc.RulePriority = c.RulePriority
	return pc
}
