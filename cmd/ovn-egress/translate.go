package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
	"io"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/manifest"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// Exit codes of translate and verify.
const (
	exitDrift = 1
	exitError = 2
)

func translateCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, Usage: "manifest file or directory (YAML or JSON, several documents per file); repeatable", Category: catXlate},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "nbctl", Usage: "nbctl (one ovn-nbctl command per line), ovsdb-json (one OVSDB transact params array) or yaml", Category: catXlate},
		&cli.StringFlag{Name: "nb-address", Usage: "optional live NB (of --zone, in interconnect) to read what translation takes from NB: the gateway routers' join addresses and SNAT, foreign cluster routes, whether NAT.match exists", Category: catOVN},
		&cli.StringFlag{Name: "zone", Usage: "interconnect: print the rows of this zone's NB only (without it, in an interconnect cluster, every zone's rows, each block headed by its zone)", Category: catXlate},
		&cli.BoolFlag{Name: "nat-match", Usage: "with --snat-backend=ovn: the rows for an NB with NAT.match (OVN ≥ 24.09: one NAT row per service); taken from the NB with --nb-address", Category: catXlate},
		&cli.BoolFlag{Name: "select-hosts", Usage: "choose hosts for EgressServices whose status.host is empty, from the Nodes given (Ready unless their conditions say otherwise), and print them", Category: catXlate},
	}
	flags = append(flags, translateFlags()...)
	return &cli.Command{
		Name:      "translate",
		Usage:     "print the NB rows the master would write for the objects in manifests (offline, no cluster)",
		ArgsUsage: " ",
		Description: "Reads EgressServices (with status.host), Services, EndpointSlices and Nodes, and EgressIPs (with\n" +
			"status.items) with the Namespaces and Pods they select, from -f, and prints the rows the master (or, per\n" +
			"zone, each node agent) would write, taking every node agent as ready. Problems go to stderr, one per line.\n" +
			"Exit code 0, or 2 when an input could not be read or parsed.",
		Flags: flags,
		Action: func(c *cli.Context) error {
			cfg, err := translateConfig(c)
			if err == nil {
				// Offline: networks not given are kind's (ovn-kubernetes' defaults).
				err = resolveNetworks(c.Context, c, &cfg, nil, "translate", nil, quietLog())
			}
			if err != nil {
				return cli.Exit(err, exitError)
			}
			cfg.AssumeAgentsReady = true
			cfg.NATMatch = c.Bool("nat-match")
			if len(c.StringSlice("filename")) == 0 {
				return cli.Exit("no input: give manifests with -f", exitError)
			}
			res, err := manifest.Read(c.StringSlice("filename")...)
			if err != nil {
				return cli.Exit(err, exitError)
			}
			in := translate.InputFromObjects(cfg, res.Objects)
			if c.Bool("select-hosts") {
				selectHosts(c, &in, res.Nodes)
			}
			if addr := c.String("nb-address"); addr != "" {
				in.Zone = c.String("zone")
				if err := factsFromNB(c.Context, addr, &in); err != nil {
					return cli.Exit(err, exitError)
				}
			}
			zones := []string{c.String("zone")}
			if zones[0] == "" && translate.Interconnect(in.Nodes) {
				zones = translate.Zones(in.Nodes)
			}
			if len(res.EgressIPs) > 0 {
				in.EgressNodes = egressip.EgressIPNodes(res.EgressIPs) // their zones' cluster routes
			}
			seen := map[string]bool{}
			for _, z := range zones {
				in.Zone = z
				d := egressservice.Translate(in)
				addEgressIPs(d, cfg, res, z)
				for _, p := range d.Problems {
					if line := p.String(); !seen[line] {
						seen[line] = true
						fmt.Fprintln(c.App.ErrWriter, line)
					}
				}
				if len(zones) > 1 || z != "" {
					fmt.Fprintf(c.App.Writer, "# zone %s\n", z)
				}
				if err := render(c.App.Writer, c.String("output"), d); err != nil {
					return cli.Exit(err, exitError)
				}
			}
			return nil
		},
	}
}

// addEgressIPs adds the rows of the manifests' EgressIPs (with their
// status.items, as the master assigned them) to d, for zone z ("": one
// central NB): the same translation the controllers run.
func addEgressIPs(d *translate.Desired, cfg translate.Config, res *manifest.Result, zone string) {
	if len(res.EgressIPs) == 0 {
		return
	}
	in, problems := egressip.EgressIPRowsFrom(cfg, res.EgressIPs, res.Namespaces, res.Pods, res.Nodes)
	if zone != "" {
		in.InZone(zone, res.Pods)
	}
	e := egressip.TranslateEgressIPs(in)
	for k, r := range e.Rows {
		d.Rows[k] = r
	}
	d.Problems = append(d.Problems, problems...)
	d.Problems = append(d.Problems, e.Problems...)
}

// selectHosts fills the empty status.host of the input's EgressServices as
// the master would (every node reachable), and prints the choices as
// comments on stdout and the problems on stderr.
func selectHosts(c *cli.Context, in *translate.Input, nodes []*corev1.Node) {
	for _, n := range nodes {
		if info := in.Nodes[n.Name]; info != nil {
			info.Ready = hosts.NodeReadyOffline(n)
		}
	}
	res := hosts.SelectHosts(hosts.SelectInput{ClusterSubnets: in.Config.ClusterSubnets, EgressServices: in.EgressServices,
		Services: in.Services, EndpointSlices: in.EndpointSlices, Nodes: in.Nodes, KeepAssigned: true})
	in.EgressServices = res.Apply(in.EgressServices)
	for _, es := range in.EgressServices {
		key := translate.EgressServiceKey(es)
		host := es.Status.Host
		if host == "" {
			host = "(none)"
		}
		fmt.Fprintf(c.App.Writer, "# host %s: %s\n", key, host)
	}
	for _, p := range res.Problems {
		fmt.Fprintln(c.App.ErrWriter, p.String())
	}
}

// factsFromNB reads what translation takes from NB (ovn.Facts): the NB is
// the one of in.Zone in interconnect.
func factsFromNB(ctx context.Context, addr string, in *translate.Input) error {
	addrs, err := ovn.ParseAddresses(addr)
	if err != nil {
		return fmt.Errorf("--nb-address: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nb, err := ovn.NewNBClient(cctx, ovn.ClientConfig{Addresses: addrs, ConnectTimeout: 10 * time.Second}, nil)
	if err != nil {
		return err
	}
	defer nb.Close()
	names := make([]string, 0, len(in.Nodes))
	for n := range in.Nodes {
		names = append(names, n)
	}
	return ovn.Facts(ctx, nb, in, nil, names)
}

func render(w io.Writer, format string, d *translate.Desired) error {
	switch format {
	case "nbctl":
		for _, cmd := range translate.NBCtlCommands(d) {
			if _, err := fmt.Fprintln(w, translate.ShellQuote(cmd)); err != nil {
				return err
			}
		}
		return nil
	case "ovsdb-json":
		b, err := translate.OVSDBTransact(d)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	case "yaml":
		b, err := translate.YAML(d)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return errors.New("unknown output format " + format + " (want nbctl, ovsdb-json or yaml)")
}
