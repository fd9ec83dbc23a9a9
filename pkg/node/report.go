package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// FieldManager names the agent's writes to its Node and its report.
const FieldManager = "ovn-egress-node"

// partWrite remembers the agent's last write of one part of its report, so
// that a lister that has not seen the write yet is not mistaken for a
// report someone else changed.
type partWrite struct {
	value    string // the part's report as written; "" when deleted
	beforeRV string // the part's resourceVersion in the lister when written ("": none)
}

// currentParts is the report the master currently sees, by part: the
// agent's report ConfigMaps, or what the agent wrote last where the lister
// lags behind it. legacy: there are none, and the entries (part 0) are the
// Node annotation of an older agent release, which the master reads then.
func (c *Controller) currentParts() (parts map[int]translate.Report, legacy bool, err error) {
	list, err := c.reportLister.List(labels.Everything())
	if err != nil {
		return nil, false, fmt.Errorf("own report configmaps: %w", err)
	}
	raw, rvs := map[int]string{}, map[int]string{}
	for _, cm := range list {
		node, part, _, perr := translate.ParseReportConfigMap(cm)
		if perr != nil || node != c.cfg.NodeName {
			continue
		}
		raw[part], rvs[part] = cm.Data[translate.ReportDataKey], cm.ResourceVersion
	}
	for part, w := range c.report {
		if rvs[part] != w.beforeRV {
			delete(c.report, part) // the lister has seen the write (or a later one)
			continue
		}
		if w.value == "" { // the lister has not seen the write yet
			delete(raw, part)
		} else {
			raw[part] = w.value
		}
	}
	if len(raw) == 0 {
		n, err := c.nodeLister.Get(c.cfg.NodeName)
		if err != nil {
			return nil, false, fmt.Errorf("own Node %s: %w", c.cfg.NodeName, err)
		}
		if v, ok := n.Annotations[translate.ReportAnnotation]; ok {
			raw[0], legacy = v, true
		}
	}
	parts = map[int]translate.Report{}
	for part, v := range raw {
		r, err := translate.ParseReport(v)
		if err != nil {
			// An unreadable part is replaced by the next publish; treat it
			// as listing nothing.
			c.log.WithError(err).WithField("part", part).Warn("ignoring the unreadable readiness report")
			r = translate.Report{}
		}
		parts[part] = r
	}
	return parts, legacy, nil
}

// currentReport is the union of the report's parts.
func (c *Controller) currentReport() (translate.Report, error) {
	parts, _, err := c.currentParts()
	if err != nil {
		return nil, err
	}
	all := translate.Report{}
	for _, r := range parts {
		maps.Copy(all, r)
	}
	return all, nil
}

// publish writes the report into the agent's report ConfigMaps (created
// owned by the Node, then merge-patched; emptied parts after the first are
// deleted), only what differs from what is there; then drops the Node
// annotation an older release wrote. An entry stays in the part that has
// it; a new one goes into the first part with room (layoutReport).
func (c *Controller) publish(ctx context.Context, r translate.Report) (bool, error) {
	parts, legacy, err := c.currentParts()
	if err != nil {
		return false, err
	}
	n, err := c.nodeLister.Get(c.cfg.NodeName)
	if err != nil {
		return false, fmt.Errorf("own Node %s: %w", c.cfg.NodeName, err)
	}
	if legacy {
		parts = nil // the annotation is no part: everything is written anew
	}
	if len(parts) == 0 && len(r) == 0 && !legacy {
		return false, nil // nothing reported, nothing to say
	}
	want, left := layoutReport(parts, r, translate.ReportShardBytes, translate.ReportParts)
	if len(left) > 0 {
		// Not reported is not programmed for the master: their pods keep
		// their node's address (or are dropped), never leak unSNATed.
		c.log.WithField("first", left[0]).Warnf("%d services do not fit the readiness report's %d parts: reported as not programmed here", len(left), translate.ReportParts)
	}
	published := false
	for _, part := range slices.Sorted(maps.Keys(want)) {
		cur, exists := parts[part]
		val := want[part].Encode()
		if exists && cur.Encode() == val {
			continue
		}
		if err := c.writePart(ctx, n, part, !exists, val); err != nil {
			return published, err
		}
		published = true
	}
	for part := range parts {
		if _, ok := want[part]; !ok {
			if err := c.deletePart(ctx, part); err != nil {
				return published, err
			}
			published = true
		}
	}
	if _, ok := n.Annotations[translate.ReportAnnotation]; ok {
		// The ConfigMaps hold the report now; the master prefers them.
		patch := []byte(`{"metadata":{"annotations":{"` + translate.ReportAnnotation + `":null}}}`)
		if _, err := c.d.Kube.CoreV1().Nodes().Patch(ctx, c.cfg.NodeName, types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return published, fmt.Errorf("drop the older release's report annotation from Node %s: %w", c.cfg.NodeName, err)
		}
	}
	return published, nil
}

// layoutReport places r's entries into parts: an entry in a part of cur
// stays there; new entries, in name order, go into the first part whose
// encoding stays within limit, else into a new part, up to maxParts parts;
// the entries that fit none are returned as left (sorted). Part 0 always
// exists; later parts only with entries.
func layoutReport(cur map[int]translate.Report, r translate.Report, limit, maxParts int) (parts map[int]translate.Report, left []string) {
	out := map[int]translate.Report{0: {}}
	size := map[int]int{0: 2}                                                          // {}
	entry := func(k string) int { return len(translate.Report{k: r[k]}.Encode()) - 1 } // less the braces, plus a comma
	placed := map[string]bool{}
	for part, entries := range cur {
		if part >= maxParts {
			continue // placed anew (a part no admission policy allows now)
		}
		for k := range entries {
			if _, ok := r[k]; ok {
				if out[part] == nil {
					out[part], size[part] = translate.Report{}, 2
				}
				out[part][k] = r[k]
				size[part] += entry(k)
				placed[k] = true
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r)) {
		if placed[k] {
			continue
		}
		e := entry(k)
		part := 0
		for ; part < maxParts && out[part] != nil && size[part]+e > limit; part++ {
		}
		if part == maxParts {
			left = append(left, k)
			continue
		}
		if out[part] == nil {
			out[part], size[part] = translate.Report{}, 2
		}
		out[part][k] = r[k]
		size[part] += e
	}
	for part, entries := range out {
		if part > 0 && len(entries) == 0 {
			delete(out, part)
		}
	}
	return out, left
}

// writePart creates part of the report (create: none in the lister) or
// merge-patches its data.
func (c *Controller) writePart(ctx context.Context, n *corev1.Node, part int, create bool, val string) error {
	name, err := translate.ReportShardName(c.cfg.NodeName, part)
	if err != nil {
		return err
	}
	w := partWrite{value: val, beforeRV: c.listedRV(name)}
	cms := c.d.Kube.CoreV1().ConfigMaps(c.cfg.ReportNamespace)
	data := map[string]string{translate.ReportNodeKey: c.cfg.NodeName, translate.ReportDataKey: val}
	if create {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.cfg.ReportNamespace,
				Labels:          map[string]string{translate.ReportLabel: "", translate.ReportNodeLabel: translate.ReportNodeHash(c.cfg.NodeName)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
			Data: data,
		}
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: FieldManager})
		if err == nil {
			c.report[part] = w
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create readiness report %s/%s: %w", c.cfg.ReportNamespace, name, err)
		}
	}
	patch, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return fmt.Errorf("readiness report patch: %w", err)
	}
	if _, err := cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("publish readiness report %s/%s: %w", c.cfg.ReportNamespace, name, err)
	}
	c.report[part] = w
	return nil
}

// deletePart removes a part the report no longer needs.
func (c *Controller) deletePart(ctx context.Context, part int) error {
	name, err := translate.ReportShardName(c.cfg.NodeName, part)
	if err != nil {
		return err
	}
	w := partWrite{beforeRV: c.listedRV(name)}
	if err := c.d.Kube.CoreV1().ConfigMaps(c.cfg.ReportNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete readiness report part %s/%s: %w", c.cfg.ReportNamespace, name, err)
	}
	c.report[part] = w
	return nil
}

// listedRV is the resourceVersion of the report ConfigMap name in the
// lister ("" when it has none).
func (c *Controller) listedRV(name string) string {
	if cm, err := c.reportLister.Get(name); err == nil {
		return cm.ResourceVersion
	}
	return ""
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
