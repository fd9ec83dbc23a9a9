package selection

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Health-check modes (--health-check-mode).
const (
	// ModeAny counts any answer of the host as reachable, a reset
	// (connection refused) included: a TCP connect to the discard port, as
	// ovn-kubernetes probes.
	ModeAny = "any"
	// ModeConnect counts only an accepted connection, for the node agent's
	// --health-listen: a host whose agent is gone is drained too.
	ModeConnect = "connect"
)

// Config tunes the selection controller. The zero value is usable after
// Validate, with health checks off.
type Config struct {
	// HealthCheckPort is the TCP port probed at every host's management-port
	// addresses (9, the discard port).
	HealthCheckPort int
	// HealthInterval is the time between two probe rounds (200ms); 0
	// disables health checks: every node counts as reachable.
	HealthInterval time.Duration
	// HealthTimeout bounds one probe of one host (500ms).
	HealthTimeout time.Duration
	// HealthHoldDown is how long a node that answers again after being
	// unreachable stays a candidate of last resort (30s; 0: none).
	HealthHoldDown time.Duration
	// HealthCheckMode is ModeAny or ModeConnect.
	HealthCheckMode string
	// HealthMaxRate caps the probes per second (5000; 0: no cap): with more
	// hosts than HealthInterval allows at that rate, each host is probed
	// every hosts/HealthMaxRate instead. At 5,000 hosts every 200 ms
	// (25,000 probes/s) a 2-core master was saturated and drained live
	// hosts (docs/performance.md §7).
	HealthMaxRate int
	// Prober, when set, replaces the TCP prober the fields above describe
	// (tests drive reachability with it). It is used only while
	// HealthInterval is positive.
	Prober Prober
	// ClusterSubnets tell cluster-networked endpoints from host-networked
	// ones (the master copies translation's).
	ClusterSubnets []netip.Prefix
	// JoinSubnets and ServiceCIDRs (the master copies translation's): a
	// load-balancer ingress IP inside them, like one inside the cluster
	// subnets or a node's own address, is never an egress source.
	JoinSubnets, ServiceCIDRs []netip.Prefix
	// UnassignedTraffic is translation's --unassigned-traffic; with "drop"
	// the Events of an EgressService left without a host say its traffic is
	// dropped.
	UnassignedTraffic translate.UnassignedTraffic
	// HostMoves, when set, is closed while status.host writes are in flight
	// and until the informer shows them (translation waits for it).
	HostMoves *controller.Gate
	// MaxPerNode caps the EgressServices (and so the egress-service labels)
	// one node is given (DefaultMaxPerNode; 0: no cap).
	MaxPerNode int
	// SelectorMoveDamping is how long after a selector change moved an
	// EgressService's host another selector change may not move it (the
	// host stays, HostMoveDamped, and moves when the time is up): a tenant
	// flapping its selector moves its host at most once per this (0: off).
	// Node label changes, failures and Service changes are never damped.
	SelectorMoveDamping time.Duration
	// MaxBatch bounds the EgressServices decided together (1000).
	MaxBatch int
	// Writers bounds the concurrent status and label writes (16).
	Writers int
	// Standoff, when set, says when to write nothing (ovn-kubernetes' own
	// egress-service feature is active: coexist.Detector); EnqueueAll
	// converges everything once it is over.
	Standoff Standoff
	// Work, when set, instruments the worker; Metrics, host selection.
	Work    *controller.Metrics
	Metrics *Metrics
	// Failovers, when set, is told of every service drained off an
	// unreachable host, with that host's last answered probe.
	Failovers Failovers
	// AlsoProbe, when set, names more nodes to health-check besides the
	// hosts (the EgressIP controller's egress nodes), and OnReachability is
	// told of every verdict change, after the hosts' drain is enqueued.
	AlsoProbe      func() []string
	OnReachability func(node string, reachable bool)
	// ProblemsChanged, when set, is told of each EgressService whose
	// problems (HostProblems) changed (the status controller).
	ProblemsChanged func(key string)
}

// Failovers follows drained services until their rows are repointed.
type Failovers interface {
	Drained(service, to string, lastGood time.Time)
}

// Standoff tells the controllers to write nothing, and why; and which
// EgressServices are held (status.host written by a foreign field manager:
// their status.host and node label are left as written).
type Standoff interface {
	Blocked() (why string, blocked bool)
	Held(key string) bool
	HeldKeys() []string
}

// DefaultHoldDown is the default HealthHoldDown: a node whose link flaps
// every few seconds (a bad cable, an overloaded top-of-rack port) stays a
// candidate of last resort while it flaps, and one restart of a node
// (kubelet, agent) costs it new services for half a minute only.
const DefaultHoldDown = 30 * time.Second

// DefaultMaxRate is the default HealthMaxRate: every host each 200 ms up to
// 1,000 hosts; a probe costs the master about 70 µs of CPU (bench health),
// so the checks take at most about a third of a core.
const DefaultMaxRate = 5000

// DefaultSelectorMoveDamping is the default SelectorMoveDamping: a
// flapping selector costs two moves a minute at most, and a tenant
// correcting a selector it just changed waits half a minute at most.
const DefaultSelectorMoveDamping = 30 * time.Second

// DefaultMaxPerNode is the default MaxPerNode: a label costs a Node about
// 190 bytes (the label and the master's managedFields entry), so 1,000 add
// about 190 KB to an object every Node watcher receives at each change,
// well under etcd's request limit (1.5 MiB).
const DefaultMaxPerNode = 1000

// DefaultConfig returns the command-line defaults.
func DefaultConfig() Config {
	return Config{HealthCheckPort: 9, HealthInterval: 200 * time.Millisecond, HealthTimeout: 500 * time.Millisecond, HealthHoldDown: DefaultHoldDown, HealthCheckMode: ModeAny,
		HealthMaxRate: DefaultMaxRate, UnassignedTraffic: translate.UnassignedAllow, MaxPerNode: DefaultMaxPerNode, SelectorMoveDamping: DefaultSelectorMoveDamping, MaxBatch: 1000, Writers: 16}
}

// WithDefaults returns c with DefaultConfig's value in each field left
// zero that has a default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.HealthCheckPort == 0 {
		c.HealthCheckPort = d.HealthCheckPort
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = d.HealthTimeout
	}
	if c.HealthCheckMode == "" {
		c.HealthCheckMode = d.HealthCheckMode
	}
	if c.UnassignedTraffic == "" {
		c.UnassignedTraffic = d.UnassignedTraffic
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.Writers <= 0 {
		c.Writers = d.Writers
	}
	return c
}

// Validate checks the configuration; a zero field that has a default
// (WithDefaults) is valid. It changes nothing.
func (c Config) Validate() error {
	switch {
	case c.HealthCheckPort < 0 || c.HealthCheckPort > 65535:
		return fmt.Errorf("health-check port %d is not within 1..65535", c.HealthCheckPort)
	case c.HealthInterval < 0 || c.HealthTimeout < 0 || c.HealthMaxRate < 0:
		return fmt.Errorf("health-check interval, timeout and max rate must not be negative")
	case c.MaxPerNode < 0:
		return fmt.Errorf("the cap of services per node must not be negative")
	case c.SelectorMoveDamping < 0:
		return fmt.Errorf("the selector move damping must not be negative")
	case c.HealthCheckMode != "" && c.HealthCheckMode != ModeAny && c.HealthCheckMode != ModeConnect:
		return fmt.Errorf("unknown health-check mode %q (want %s or %s)", c.HealthCheckMode, ModeAny, ModeConnect)
	case c.UnassignedTraffic != "" && c.UnassignedTraffic != translate.UnassignedAllow && c.UnassignedTraffic != translate.UnassignedDrop:
		return fmt.Errorf("unknown unassigned-traffic policy %q (want allow or drop)", c.UnassignedTraffic)
	case len(c.ClusterSubnets) == 0:
		return fmt.Errorf("host selection needs the cluster subnets")
	}
	return nil
}

// ProbeInterval is the time between two probes of one host when hosts
// nodes are probed: HealthInterval, stretched by HealthMaxRate.
func (c *Config) ProbeInterval(hosts int) time.Duration {
	return probeInterval(c.HealthInterval, c.HealthMaxRate, hosts)
}

// prober returns the prober health checks use, or nil when they are off.
func (c *Config) prober() Prober {
	switch {
	case c.HealthInterval <= 0:
		return nil
	case c.Prober != nil:
		return c.Prober
	}
	return &TCPProber{Port: c.HealthCheckPort, Mode: c.HealthCheckMode}
}
