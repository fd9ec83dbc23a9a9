package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/controller"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/discover"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// networkFlags are the flags of the cluster's networks, by discover kind.
var networkFlags = []struct{ flag, kind string }{
	{"cluster-subnets", discover.Cluster}, {"join-subnets", discover.Join}, {"service-cidrs", discover.Service}}

// resolveNetworks fills the networks the flags left empty: from the
// cluster (discover) when kube is given, else — and for what the cluster
// does not say — ovn-kubernetes' defaults of a kind cluster, with a
// warning. It logs where each came from, reports a flag the cluster
// disagrees with (a Warning Event on the object that says otherwise, and
// the log), exposes the result as ovn_egress_network (reg may be nil), and
// validates the configuration.
func resolveNetworks(ctx context.Context, c *cli.Context, cfg *translate.Config, kube kubernetes.Interface, component string,
	reg prometheus.Registerer, log *logrus.Entry) error {
	var found discover.Found
	if kube != nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		if found, err = discover.Discover(ctx, kube); err != nil {
			return fmt.Errorf("discover the cluster's networks: %w", err)
		}
	}
	d := translate.DefaultConfig()
	fields := map[string][]netip.Prefix{discover.Cluster: cfg.ClusterSubnets, discover.Join: cfg.JoinSubnets, discover.Service: cfg.ServiceCIDRs}
	defaults := map[string][]netip.Prefix{discover.Cluster: d.ClusterSubnets, discover.Join: d.JoinSubnets, discover.Service: d.ServiceCIDRs}
	sources := map[string]string{}
	for _, nf := range networkFlags {
		if strings.TrimSpace(c.String(nf.flag)) == "" && len(fields[nf.kind]) == 0 {
			switch {
			case len(found.Networks[nf.kind]) > 0:
				fields[nf.kind], sources[nf.kind] = found.Networks[nf.kind], found.Sources[nf.kind]
			default:
				fields[nf.kind], sources[nf.kind] = defaults[nf.kind], "default"
				if kube != nil && nf.kind != discover.Join {
					log.Warnf("the cluster does not say its %s networks (no ovn-config of ovn-kubernetes, no ServiceCIDRs): using %s; give --%s",
						nf.kind, prefixList(defaults[nf.kind]), nf.flag)
				}
			}
			continue
		}
		sources[nf.kind] = "flag"
		if msg := discover.Disagreement(nf.kind, fields[nf.kind], found); msg != "" {
			msg = "--" + nf.flag + ": " + msg
			log.Warn(msg)
			if obj := found.Objects[nf.kind]; obj != nil && kube != nil {
				warnOn(ctx, kube, component, obj, msg)
			}
		}
	}
	cfg.ClusterSubnets, cfg.JoinSubnets, cfg.ServiceCIDRs = fields[discover.Cluster], fields[discover.Join], fields[discover.Service]
	entry := log
	for _, nf := range networkFlags {
		entry = entry.WithField(nf.flag, prefixList(fields[nf.kind])+" ("+sources[nf.kind]+")")
	}
	entry.Info("cluster networks")
	if reg != nil {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovn_egress_network",
			Help: "The cluster networks in use (always 1): kind cluster, join or service; source flag, default or the object read."},
			[]string{"kind", "cidr", "source"})
		for _, nf := range networkFlags {
			for _, p := range fields[nf.kind] {
				g.WithLabelValues(nf.kind, p.String(), sources[nf.kind]).Set(1)
			}
		}
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return cfg.Validate()
}

// warnOn records one Warning Event on obj and waits for it to be sent.
func warnOn(ctx context.Context, kube kubernetes.Interface, component string, obj runtime.Object, msg string) {
	rec, stop, err := controller.NewRecorder(ctx, kube, corev1.EventSource{Component: "ovn-egress-" + component})
	if err != nil {
		return
	}
	defer stop()
	rec.Event(obj, corev1.EventTypeWarning, "NetworkFlagDisagrees", strings.TrimSpace(msg))
}

// quietLog is the log of the CLI tools (translate, verify): warnings only,
// on stderr.
func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	return logrus.NewEntry(l)
}
