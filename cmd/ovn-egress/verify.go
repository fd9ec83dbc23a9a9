package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressip"
	"github.com/ovn-egress/ovn-egress/pkg/translate/egressservice"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/urfave/cli/v2"

	egressipv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressip/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/coexist"
	"github.com/ovn-egress/ovn-egress/pkg/nbdb"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

func verifyCommand() *cli.Command {
	flags := append(kubeFlags(), nbFlags()...)
	flags = append(flags, translateFlags()...)
	flags = append(flags,
		&cli.StringFlag{Name: "zone", Usage: "interconnect: the zone whose NB --nb-address is (in current ovn-kubernetes, a node's name); default: found from the NB's gateway routers", Category: catXlate},
		&cli.StringFlag{Name: "sb-address", Usage: "the SB of --nb-address's OVN (in interconnect: the zone's), whose logical flows must name each policy and NAT row ovn-egress owns; none: skip that check (default: derived from --nb-address: ovnnb_db.sock → ovnsb_db.sock, port 6641 → 6642; the --nb-* TLS files apply)", Category: catOVN},
		&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "give up after this long", Category: catOVN},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text, or json: one object {zone, drift, noflow, conflicts, problems} on stdout (the exit codes are the same)"},
		reportNamespaceFlag(catXlate))
	return &cli.Command{
		Name:  "verify",
		Usage: "compare the live NB with what the cluster's objects require; print every missing, extra or different row, and every conflict",
		Description: "Compares one NB (in interconnect: one zone's, --zone) with the rows ovn-egress should own there, and\n" +
			"reports what stops them from working: ovn-kubernetes' own egress-service rows or status writes, another\n" +
			"controller's policies at ovn-egress's priorities matching its endpoints, a central NB used as a zone.\n" +
			"Reads the SB too: a policy or NAT row of ovn-egress that northd turned into no logical flow (a reroute\n" +
			"whose next hop no router port reaches) is reported as noflow.\n" +
			"Exit code 0 when NB holds exactly the rows ovn-egress should own, northd uses each of them and nothing\n" +
			"conflicts, 1 when a row drifted, has no flow or conflicts (each is printed), 2 on errors.",
		Flags: flags,
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			if o := c.String("output"); o != "text" && o != "json" {
				return cli.Exit(fmt.Sprintf("--output %q: want text or json", o), exitError)
			}
			res, err := verify(ctx, c)
			if err != nil {
				return cli.Exit(err, exitError)
			}
			if c.String("output") == "json" {
				return res.writeJSON(c.App.Writer)
			}
			for _, p := range res.problems {
				fmt.Fprintln(c.App.ErrWriter, p.String())
			}
			if res.zone != "" {
				fmt.Fprintf(c.App.Writer, "# zone %s\n", res.zone)
			}
			for _, ch := range res.changes {
				fmt.Fprintln(c.App.Writer, ch.String())
			}
			for _, u := range res.unflowed {
				fmt.Fprintln(c.App.Writer, u.String())
			}
			for _, cf := range res.conflicts {
				fmt.Fprintln(c.App.Writer, "conflict  "+cf)
			}
			if err := res.drifted(); err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, "no drift")
			return nil
		},
	}
}

// verifyResult is what verify found in one NB.
type verifyResult struct {
	zone      string
	changes   []ovn.Change
	unflowed  []ovn.Unflowed
	conflicts []string
	problems  translate.Problems
}

// drifted is the exit of a result with anything to report, nil without.
func (r verifyResult) drifted() error {
	if n := len(r.changes) + len(r.unflowed) + len(r.conflicts); n > 0 {
		return cli.Exit(fmt.Sprintf("%d rows drifted, %d rows without logical flows, %d conflicts",
			len(r.changes), len(r.unflowed), len(r.conflicts)), exitDrift)
	}
	return nil
}

// writeJSON prints the result as one JSON object (every list present, empty
// when nothing is in it) and returns the exit the text output has.
func (r verifyResult) writeJSON(w io.Writer) error {
	doc := struct {
		Zone      string              `json:"zone,omitempty"`
		Drift     []ovn.Change        `json:"drift"`
		NoFlow    []ovn.Unflowed      `json:"noflow"`
		Conflicts []string            `json:"conflicts"`
		Problems  []translate.Problem `json:"problems"`
	}{r.zone, nonNil(r.changes), nonNil(r.unflowed), nonNil(r.conflicts), nonNil([]translate.Problem(r.problems))}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return cli.Exit(err, exitError)
	}
	return r.drifted()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func verify(ctx context.Context, c *cli.Context) (verifyResult, error) {
	var res verifyResult
	cfg, err := translateConfig(c)
	if err != nil {
		return res, err
	}
	nbCfg, err := nbConfig(c)
	if err != nil {
		return res, err
	}
	rc, err := kubeConfig(c)
	if err != nil {
		return res, err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return res, err
	}
	// The networks the master uses, as it finds them (flags given win).
	if err := resolveNetworks(ctx, c, &cfg, kc, "verify", nil, quietLog()); err != nil {
		return res, err
	}
	objs, err := listObjects(ctx, rc, c.String("report-namespace"))
	if err != nil {
		return res, err
	}
	nb, err := ovn.NewNBClient(ctx, nbCfg, nil)
	if err != nil {
		return res, err
	}
	defer nb.Close()
	in := translate.InputFromObjects(cfg, objs)
	remote, err := ovn.HasRemotePorts(ctx, nb)
	if err != nil {
		return res, err
	}
	ic := translate.Interconnect(in.Nodes) || remote
	switch {
	case c.String("zone") != "":
		in.Zone = c.String("zone")
	case ic:
		if in.Zone, err = zoneOfNB(ctx, nb, in.Nodes); err != nil {
			return res, err
		}
	}
	if in.Zone != "" && !slices.Contains(translate.Zones(in.Nodes), in.Zone) {
		return res, fmt.Errorf("--zone %s: no node is in that zone (zones: %v)", in.Zone, translate.Zones(in.Nodes))
	}
	res.zone = in.Zone
	keys := in.AllKeys()
	owned, err := ovn.OwnedKeys(ctx, nb)
	if err != nil {
		return res, err
	}
	for _, k := range owned {
		if _, eip := k.EgressIP(); eip {
			continue // the EgressIPs' keys: verifyEgressIPs
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	names := make([]string, 0, len(objs.Nodes))
	for _, n := range objs.Nodes {
		names = append(names, n.Name)
	}
	if err := ovn.Facts(ctx, nb, &in, keys, names); err != nil {
		return res, err
	}
	eips, err := listEgressIPs(ctx, rc)
	if err != nil {
		return res, err
	}
	if in.Zone != "" {
		in.EgressNodes = egressip.EgressIPNodes(eips) // their zones' cluster routes
	}
	d := egressservice.Translate(in)
	eipKeys, err := verifyEgressIPs(ctx, rc, nb, in.Config, in.Zone, eips, objs.Nodes, d)
	if err != nil {
		return res, err
	}
	keys = append(keys, eipKeys...)
	plan, err := ovn.BuildPlan(ctx, nb, keys, d)
	if err != nil {
		return res, err
	}
	res.changes, res.problems = plan.Changes(), d.Problems
	if res.unflowed, err = unflowed(ctx, c, nbCfg, nb, keys); err != nil {
		return res, err
	}
	if res.conflicts, err = conflicts(ctx, nb, cfg, objs, d, remote && in.Zone == "", len(eipKeys) > 0); err != nil {
		return res, err
	}
	return res, nil
}

// flowSettle is how long a row without logical flows is given to get them
// (northd may not have run since it was written).
const flowSettle = 3 * time.Second

// unflowed reads the SB (--sb-address) and returns the owned policies and
// NAT rows of keys that no logical flow names.
func unflowed(ctx context.Context, c *cli.Context, nbCfg ovn.ClientConfig, nb client.Client, keys []translate.Key) ([]ovn.Unflowed, error) {
	sbCfg := nbCfg
	const hint = "give --sb-address (or --sb-address=none to skip the check of logical flows)"
	derived := false
	switch a := c.String("sb-address"); a {
	case "none":
		return nil, nil
	case "":
		addrs, err := ovn.SBAddresses(nbCfg.Addresses)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", err, hint)
		}
		sbCfg.Addresses, derived = addrs, true
	default:
		addrs, err := ovn.ParseAddresses(a)
		if err != nil {
			return nil, fmt.Errorf("--sb-address: %w", err)
		}
		sbCfg.Addresses = addrs
	}
	sb, err := ovn.NewSBClient(ctx, sbCfg, nil)
	if err != nil && derived {
		return nil, fmt.Errorf("%w (derived from --nb-address): %s", err, hint)
	}
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	return ovn.UnflowedRows(ctx, nb, sb, keys, flowSettle)
}

// zoneOfNB finds the interconnect zone an NB belongs to: the zone of the
// nodes whose gateway router is in it (exactly one zone).
func zoneOfNB(ctx context.Context, nb client.Client, nodes map[string]*translate.NodeInfo) (string, error) {
	var grs []nbdb.LogicalRouter
	err := nb.WhereCache(func(lr *nbdb.LogicalRouter) bool { return strings.HasPrefix(lr.Name, "GR_") }).List(ctx, &grs)
	if err != nil && err != client.ErrNotFound {
		return "", fmt.Errorf("list gateway routers: %w", err)
	}
	zones := map[string]bool{}
	for _, lr := range grs {
		if n := nodes[strings.TrimPrefix(lr.Name, "GR_")]; n != nil {
			zones[n.ZoneName()] = true
		}
	}
	if len(zones) != 1 {
		return "", fmt.Errorf("interconnect cluster: this NB holds the gateway routers of %d zones (%v); give --zone", len(zones), slices.Sorted(maps.Keys(zones)))
	}
	for z := range zones {
		return z, nil
	}
	return "", nil
}

// conflicts lists what stops ovn-egress's rows from working in this NB:
// ovn-kubernetes' own egress-service handling (its rows), its EgressIP
// serving pods here (when ovn-egress's EgressIPs have rows here: egressIPs),
// status.host written by another field manager within the master's hold,
// other controllers' policies at the reroute priority matching
// ovn-egress's endpoints (OVN's choice between equal priorities is
// undefined), and a central translation of a zone's NB.
func conflicts(ctx context.Context, nb client.Client, cfg translate.Config, objs translate.Objects, d *translate.Desired, centralOnZone, egressIPs bool) ([]string, error) {
	var out []string
	pols, served, _, err := ovn.ForeignEgressService(ctx, nb, cfg.ReroutePriority)
	if err != nil {
		return nil, err
	}
	cf := coexist.Conflict{EgressSVCPolicies: pols, ServedPods: served, InterconnectNB: centralOnZone}
	if cf.EgressIPRows, err = ovn.OVNKubeEgressIPServing(ctx, nb); err != nil {
		return nil, err
	}
	if cf.Active() {
		out = append(out, cf.String())
	}
	if cf.EgressIPRows > 0 && egressIPs {
		out = append(out, cf.EgressIPString())
	}
	// A status.host another field manager wrote within the master's hold
	// (its default): the master leaves that service's host and label alone.
	for _, es := range objs.EgressServices {
		w, foreign := coexist.ForeignStatusWriter(es.ManagedFields)
		if !foreign {
			continue
		}
		at, err := time.Parse(time.RFC3339, w.Time)
		if err == nil && time.Since(at) >= coexist.DefaultHold {
			continue
		}
		out = append(out, fmt.Sprintf("EgressService %s: status.host %q was written by field manager %q, not ovn-egress: the master leaves its host and node label alone for %s after that write (`ovn-egress migrate --apply` ends it)",
			translate.EgressServiceKey(es), es.Status.Host, w.Manager, coexist.DefaultHold))
	}
	eps := map[string]string{} // endpoint → the owned set holding it
	for _, k := range d.Keys() {
		for _, as := range d.Rows[k].AddressSets {
			if as.ExternalIDs[translate.KeyOwnerType] == translate.OwnerNodeIPs {
				continue
			}
			for _, a := range as.Addresses {
				eps[a] = as.ExternalIDs[translate.KeyID]
			}
		}
	}
	foreign, err := ovn.ForeignPolicies(ctx, nb, []int{cfg.ReroutePriority})
	if err != nil {
		return nil, err
	}
	for _, p := range foreign {
		if _, svc := p.ExternalIDs[ovn.EgressSVCKey]; svc {
			continue // counted above
		}
		for _, ip := range ovn.MatchSources(p.Match) {
			if set, ok := eps[ip]; ok {
				out = append(out, fmt.Sprintf("Logical_Router_Policy %s of another controller at priority %d (%s) also matches endpoint %s of %s: OVN picks between equal-priority policies in no defined order",
					p.UUID, p.Priority, p.Match, ip, set))
			}
		}
	}
	return out, nil
}

// listObjects reads every object translation needs from the API server,
// the node agents' reports only from reportNS (a ConfigMap of that name
// elsewhere is anyone's).
func listObjects(ctx context.Context, cfg *rest.Config, reportNS string) (translate.Objects, error) {
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
	reports, err := kube.CoreV1().ConfigMaps(reportNS).List(ctx, metav1.ListOptions{LabelSelector: translate.ReportLabel})
	if err != nil {
		return objs, fmt.Errorf("list the node agents' report configmaps: %w", err)
	}
	for i := range reports.Items {
		objs.Reports = append(objs.Reports, &reports.Items[i])
	}
	return objs, nil
}

// listEgressIPs lists the EgressIPs (none from an API server without the
// EgressIP CRD).
func listEgressIPs(ctx context.Context, rc *rest.Config) ([]*egressipv1.EgressIP, error) {
	eipc, err := eipclient.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	list, err := eipc.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list egressips: %w", err)
	}
	eips := make([]*egressipv1.EgressIP, 0, len(list.Items))
	for i := range list.Items {
		eips = append(eips, &list.Items[i])
	}
	return eips, nil
}

// verifyEgressIPs adds to d the rows eips should have on this NB (the
// central one, or one interconnect zone's) and returns their keys with
// those of the EgressIP rows NB holds.
func verifyEgressIPs(ctx context.Context, rc *rest.Config, nb client.Client, cfg translate.Config, zone string,
	eips []*egressipv1.EgressIP, nodes []*corev1.Node, d *translate.Desired) ([]translate.Key, error) {
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	keys, served, err := ovn.EgressIPFacts(ctx, nb)
	if err != nil {
		return nil, err
	}
	if len(eips) == 0 && len(keys) == 0 {
		return nil, nil
	}
	nsl, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	podl, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	for _, e := range eips {
		keys = append(keys, translate.EgressIPKey(e.Name))
	}
	nss := make([]*corev1.Namespace, 0, len(nsl.Items))
	for i := range nsl.Items {
		nss = append(nss, &nsl.Items[i])
	}
	pods := make([]*corev1.Pod, 0, len(podl.Items))
	for i := range podl.Items {
		pods = append(pods, &podl.Items[i])
	}
	in, problems := egressip.EgressIPRowsFrom(cfg, eips, nss, pods, nodes)
	if zone != "" {
		in.InZone(zone, pods)
	}
	in.Served = served
	d.Merge(egressip.TranslateEgressIPs(in))
	d.Problems = append(d.Problems, problems...)
	slices.Sort(keys)
	return slices.Compact(keys), nil
}
