package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
)

// migrateStatusWriters lists (and, with apply, takes over) the
// EgressServices whose status.host another field manager owns — real
// ovnkube's cluster-manager, whose manager is its host's name — so that the
// master's hold on them ends at once (coexist.TakeOver: the value is kept,
// no host moves by it).
func migrateStatusWriters(ctx context.Context, c *cli.Context, verb string, apply bool) (int, error) {
	rc, err := kubeConfig(c)
	if err != nil {
		return 0, err
	}
	eg, err := versioned.NewForConfig(rc)
	if err != nil {
		return 0, fmt.Errorf("EgressService client: %w", err)
	}
	held, objs, err := coexist.ForeignStatuses(ctx, eg)
	if err != nil {
		return 0, err
	}
	for i, h := range held {
		fmt.Fprintf(c.App.Writer, "%s: API status.host %q of EgressService %s, written by field manager %q (the value is kept; ovn-egress takes it over)\n",
			verb, h.Host, h.Key, h.Writer.Manager)
		if apply {
			if err := coexist.TakeOver(ctx, eg, objs[i]); err != nil {
				return i, err
			}
		}
	}
	return len(held), nil
}
