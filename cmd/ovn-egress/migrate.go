package main

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovn-egress/ovn-egress/pkg/node"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
)

func migrateCommand() *cli.Command {
	flags := append(append(nbFlags(), kubeFlags()...),
		&cli.BoolFlag{Name: "apply", Usage: "remove what is listed (without it: a dry run that changes nothing)", Category: catXlate},
		&cli.BoolFlag{Name: "status", Usage: "also the API (--kubeconfig): EgressServices whose status.host another field manager wrote (ovn-kubernetes' cluster-manager) — ovn-egress takes the field over without changing it, ending the master's hold on them", Category: catKube},
		&cli.BoolFlag{Name: "node", Usage: "also this node's nftables: ovn-kubernetes' egress-services chain and egress-service-snat-v4/v6 maps in table inet ovn-kubernetes", Category: catNode},
		&cli.StringFlag{Name: "netns", Usage: "with --node: the network namespace to look in (default: the host's)", Category: catNode},
		&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "give up after this long", Category: catOVN},
	)
	return &cli.Command{
		Name:  "migrate",
		Usage: "list (dry run) or remove (--apply) what ovn-kubernetes' built-in egress features left behind",
		Description: "Lists ovn-kubernetes' own EgressService rows in one NB (--nb-address; in interconnect, run it for\n" +
			"every zone's NB): its reroute policies carrying an EgressSVC external id, the addresses of its\n" +
			"egresssvc-served-pods sets (emptied, not deleted: its EgressIP policy references them), and its\n" +
			"EgressIP no-reroute policies (EIP-No-Reroute-*) when its EgressIP serves no pod there. With --node,\n" +
			"also this node's egress-services nftables chain and maps. With --status, the EgressServices whose\n" +
			"status.host another field manager wrote (taken over, value unchanged). Only objects that are provably\n" +
			"ovn-kubernetes' are touched; ip rules are not (see docs/migration.md). Run it only after ovn-kubernetes\n" +
			"runs with --enable-egress-service=false (and --enable-egress-ip=false), or it writes them again.\n" +
			"Exit 0, or 2 on errors.",
		Flags: flags,
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			n, err := migrate(ctx, c)
			if err != nil {
				return cli.Exit(err, exitError)
			}
			switch {
			case n == 0:
				fmt.Fprintln(c.App.Writer, "nothing of ovn-kubernetes' egress features is left")
			case c.Bool("apply"):
				fmt.Fprintf(c.App.Writer, "removed %d objects\n", n)
			default:
				fmt.Fprintf(c.App.Writer, "dry run: nothing changed; --apply removes these %d objects\n", n)
			}
			return nil
		},
	}
}

func migrate(ctx context.Context, c *cli.Context) (int, error) {
	apply, n := c.Bool("apply"), 0
	verb := "would remove"
	if apply {
		verb = "removing"
	}
	if c.String("nb-address") != "" {
		cfg, err := nbConfig(c)
		if err != nil {
			return 0, err
		}
		nb, err := ovn.NewNBClient(ctx, cfg, nil)
		if err != nil {
			return 0, err
		}
		defer nb.Close()
		ls, err := ovn.Leftovers(ctx, nb)
		if err != nil {
			return 0, err
		}
		for _, l := range ls {
			fmt.Fprintf(c.App.Writer, "%s: NB %s\n", verb, l)
		}
		if apply {
			if err := ovn.RemoveLeftovers(ctx, nb, ls); err != nil {
				return 0, err
			}
		}
		n += len(ls)
	} else if !c.Bool("node") && !c.Bool("status") {
		return 0, fmt.Errorf("nothing to look at: give --nb-address, --node, --status, or several")
	}
	if c.Bool("status") {
		k, err := migrateStatusWriters(ctx, c, verb, apply)
		n += k
		if err != nil {
			return n, err
		}
	}
	if c.Bool("node") {
		ls, err := node.MigrateNode(ctx, c.String("netns"), apply)
		if err != nil {
			return 0, err
		}
		for _, l := range ls {
			fmt.Fprintf(c.App.Writer, "%s: node %s\n", verb, l)
		}
		n += len(ls)
	}
	return n, nil
}
