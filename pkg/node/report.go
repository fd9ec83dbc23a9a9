package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// FieldManager names the agent's writes to its Node.
const FieldManager = "ovn-egress-node"

// reportState remembers the agent's last write of the report, so that a
// Node lister that has not seen the write yet is not mistaken for a report
// someone else changed.
type reportState struct {
	written  string // the value last patched
	beforeRV string // the Node's resourceVersion in the lister when patched
}

// currentReport is the report the master currently sees: the Node's
// annotation, or what the agent wrote last if the lister lags behind it.
func (c *Controller) currentReport() (string, translate.Report, error) {
	n, err := c.nodeLister.Get(c.cfg.NodeName)
	if err != nil {
		return "", nil, fmt.Errorf("own Node %s: %w", c.cfg.NodeName, err)
	}
	raw := n.Annotations[translate.ReportAnnotation]
	if c.report.written != "" && n.ResourceVersion == c.report.beforeRV {
		raw = c.report.written
	}
	r, err := translate.ParseReport(raw)
	if err != nil {
		// An unreadable report is replaced by the next publish; treat it
		// as listing nothing.
		c.log.WithError(err).Warn("ignoring the unreadable readiness report on the Node")
		r = translate.Report{}
	}
	return raw, r, nil
}

// publish writes the report onto the agent's own Node, as a JSON merge
// patch of only the annotation, and only when it differs from what is
// there.
func (c *Controller) publish(ctx context.Context, r translate.Report) (bool, error) {
	raw, _, err := c.currentReport()
	if err != nil {
		return false, err
	}
	val := r.Encode()
	if raw == val || (raw == "" && len(r) == 0) {
		return false, nil
	}
	n, err := c.nodeLister.Get(c.cfg.NodeName)
	if err != nil {
		return false, fmt.Errorf("own Node %s: %w", c.cfg.NodeName, err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{translate.ReportAnnotation: val}}})
	if err != nil {
		return false, fmt.Errorf("readiness report patch: %w", err)
	}
	if _, err := c.d.Kube.CoreV1().Nodes().Patch(ctx, c.cfg.NodeName, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return false, fmt.Errorf("publish readiness report on Node %s: %w", c.cfg.NodeName, err)
	}
	c.report = reportState{written: val, beforeRV: n.ResourceVersion}
	return true, nil
}

// withdrawn lists the services whose entry in before goes away in after, or
// whose entry loses a SNAT family: the master must stop rerouting them here
// before their SNAT or rules are removed.
func withdrawn(before, after translate.Report) []string {
	var out []string
	for key, b := range before {
		a, ok := after[key]
		if !ok || lostFamily(b.IngressIPs, a.IngressIPs) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

func lostFamily(before, after []string) bool {
	fams := func(ips []string) map[ipfamily.Family]bool {
		m := map[ipfamily.Family]bool{}
		for _, s := range ips {
			if a, err := netip.ParseAddr(s); err == nil {
				m[ipfamily.Of(a)] = true
			}
		}
		return m
	}
	fa := fams(after)
	for f := range fams(before) {
		if !fa[f] {
			return true
		}
	}
	return false
}
