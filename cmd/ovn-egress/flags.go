package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ovn-egress/ovn-egress/pkg/observe"
)

// Flag categories, shared by the subcommands so --help groups them alike.
const (
	catKube    = "Kubernetes"
	catOVN     = "OVN"
	catXlate   = "Translation"
	catSelect  = "Host selection"
	catNode    = "Node"
	catLogging = "Logging"
	catObserve = "Metrics and health"
)

func observeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "metrics-address", Usage: "serve /metrics, /healthz and /readyz on this host:port (empty: off; the manifests use :9476 for the master and :9477 for the node agent)", Category: catObserve},
		&cli.StringFlag{Name: "metrics-ip", Usage: "bind --metrics-address's port on this IP only, in place of its host part (the chart's node agents: the node's IP, status.hostIP, so that a host-network listener is not on every host address)", Category: catObserve},
	}
}

// metricsAddress is --metrics-address (addr), its host part replaced by
// --metrics-ip (ip) when that is set (either family: brackets as needed).
func metricsAddress(addr, ip string) (string, error) {
	if addr == "" || ip == "" {
		return addr, nil
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", fmt.Errorf("--metrics-ip: %w", err)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--metrics-address: %w", err)
	}
	return net.JoinHostPort(a.String(), port), nil
}

// startObserve starts the metrics and health listener of --metrics-address
// (nothing is served when it is empty, but metrics are still kept).
func startObserve(c *cli.Context, log *logrus.Entry) (*observe.Server, error) {
	addr, err := metricsAddress(c.String("metrics-address"), c.String("metrics-ip"))
	if err != nil {
		return nil, err
	}
	s := observe.New(observe.Config{Address: addr, Version: version, Commit: commit, Component: c.Command.Name},
		log.WithField("subsys", "observe"))
	return s, s.Start(c.Context)
}

func loggingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "panic|fatal|error|warn|info|debug|trace", Category: catLogging, EnvVars: []string{"OVN_EGRESS_LOG_LEVEL"}},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text|json", Category: catLogging},
	}
}

// newLogger builds the process's one logger from --log-level/--log-format and
// returns an entry tagged with the component's name.
func newLogger(c *cli.Context, component string) (*logrus.Entry, error) {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	lvl, err := logrus.ParseLevel(c.String("log-level"))
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l.SetLevel(lvl)
	switch c.String("log-format") {
	case "text":
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		l.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("--log-format: want text or json, got %q", c.String("log-format"))
	}
	entry := l.WithField("component", component)
	routeKlog(entry)
	return entry, nil
}

func kubeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (in-cluster config when absent)", Category: catKube, EnvVars: []string{"KUBECONFIG"}},
		&cli.Float64Flag{Name: "kube-api-qps", Value: 50, Usage: "client-side QPS limit towards the API server", Category: catKube},
		&cli.IntFlag{Name: "kube-api-burst", Value: 100, Usage: "client-side burst towards the API server", Category: catKube},
	}
}

// kubeConfig returns the REST config from --kubeconfig, or the in-cluster one.
func kubeConfig(c *cli.Context) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if p := c.String("kubeconfig"); p != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", p)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.QPS = float32(c.Float64("kube-api-qps"))
	cfg.Burst = c.Int("kube-api-burst")
	cfg.UserAgent = "ovn-egress/" + version
	return cfg, nil
}
