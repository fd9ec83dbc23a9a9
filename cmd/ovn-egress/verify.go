package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/urfave/cli/v2"

	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

func verifyCommand() *cli.Command {
	flags := append(kubeFlags(), nbFlags()...)
	flags = append(flags, translateFlags()...)
	flags = append(flags, &cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "give up after this long", Category: catOVN})
	return &cli.Command{
		Name:  "verify",
		Usage: "compare the live NB with what the cluster's objects require; print every missing, extra or different row",
		Description: "Exit code 0 when NB holds exactly the rows ovn-egress should own, 1 when it drifted (each row is\n" +
			"printed), 2 on errors.",
		Flags: flags,
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			changes, problems, err := verify(ctx, c)
			if err != nil {
				return cli.Exit(err, exitError)
			}
			for _, p := range problems {
				fmt.Fprintln(c.App.ErrWriter, p.String())
			}
			for _, ch := range changes {
				fmt.Fprintln(c.App.Writer, ch.String())
			}
			if len(changes) > 0 {
				return cli.Exit(fmt.Sprintf("%d rows drifted", len(changes)), exitDrift)
			}
			fmt.Fprintln(c.App.Writer, "no drift")
			return nil
		},
	}
}

func verify(ctx context.Context, c *cli.Context) ([]ovn.Change, translate.Problems, error) {
	cfg, err := translateConfig(c)
	if err != nil {
		return nil, nil, err
	}
	nbCfg, err := nbConfig(c)
	if err != nil {
		return nil, nil, err
	}
	rc, err := kubeConfig(c)
	if err != nil {
		return nil, nil, err
	}
	objs, err := listObjects(ctx, rc)
	if err != nil {
		return nil, nil, err
	}
	nb, err := ovn.NewNBClient(ctx, nbCfg, nil)
	if err != nil {
		return nil, nil, err
	}
	defer nb.Close()
	cfg.NATMatch = ovn.FeaturesOf(nb).NATMatch
	in := translate.InputFromObjects(cfg, objs)
	keys := in.AllKeys()
	owned, err := ovn.OwnedKeys(ctx, nb)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range owned {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if err := ovn.CurrentMembers(ctx, nb, keys, in.Current); err != nil {
		return nil, nil, err
	}
	if cfg.Backend == translate.BackendOVN {
		var names []string
		for _, n := range objs.Nodes {
			names = append(names, n.Name)
		}
		in.Gateways = ovn.Gateways(ctx, nb, names, in.Config.ClusterSubnets)
	}
	d := translate.Translate(in)
	plan, err := ovn.BuildPlan(ctx, nb, keys, d)
	if err != nil {
		return nil, nil, err
	}
	return plan.Changes(), d.Problems, nil
}

// listObjects reads every object translation needs from the API server.
func listObjects(ctx context.Context, cfg *rest.Config) (translate.Objects, error) {
	var objs translate.Objects
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return objs, err
	}
	eg, err := egressclient.NewForConfig(cfg)
	if err != nil {
		return objs, err
	}
	esl, err := eg.K8sV1().EgressServices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return objs, fmt.Errorf("list egressservices: %w", err)
	}
	for i := range esl.Items {
		objs.EgressServices = append(objs.EgressServices, &esl.Items[i])
	}
	svcs, err := kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return objs, fmt.Errorf("list services: %w", err)
	}
	for i := range svcs.Items {
		objs.Services = append(objs.Services, &svcs.Items[i])
	}
	eps, err := kube.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return objs, fmt.Errorf("list endpointslices: %w", err)
	}
	for i := range eps.Items {
		objs.EndpointSlices = append(objs.EndpointSlices, &eps.Items[i])
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return objs, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		objs.Nodes = append(objs.Nodes, &nodes.Items[i])
	}
	return objs, nil
}
