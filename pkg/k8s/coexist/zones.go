package coexist

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// ReportVerdictKey is the data key of a node agent's first report
// ConfigMap (translate.ReportConfigMapName) where the agent's zone
// translation says what of ovn-kubernetes it found in its zone's NB: the ic
// master has no NB of its own and stands back by these.
const ReportVerdictKey = "zone-conflict"

// ZoneVerdict is one zone's finding, each part the text the zone's
// standoff logs ("" when that part is clear).
type ZoneVerdict struct {
	EgressService string `json:"egressService,omitempty"`
	EgressIP      string `json:"egressIP,omitempty"`
}

// VerdictOf is what a zone publishes of its conflict.
func VerdictOf(c Conflict) ZoneVerdict {
	var v ZoneVerdict
	if c.EgressSVCPolicies > 0 || c.ServedPods > 0 || c.ForeignInstance != "" {
		v.EgressService = c.String()
	}
	if c.EgressIPRows > 0 || c.ForeignInstance != "" {
		v.EgressIP = c.EgressIPString()
	}
	return v
}

// Encode renders the verdict; "" when there is nothing to say.
func (v ZoneVerdict) Encode() string {
	if v == (ZoneVerdict{}) {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// zoneVerdicts reads the verdicts from the first part of every node's
// report: the zones (nodes) whose NB holds ovn-kubernetes' egress-service
// rows, and those whose NB holds its serving EgressIP rows, sorted. An
// unreadable verdict counts as none (the agent writes it; a forged one can
// only stand ovn-egress back, which an agent's token could do anyway by
// withholding its report).
func zoneVerdicts(cms []*corev1.ConfigMap) (esZones, eipZones []string) {
	for _, cm := range cms {
		raw := cm.Data[ReportVerdictKey]
		if raw == "" {
			continue
		}
		node := cm.Data[translate.ReportNodeKey]
		if first, err := translate.ReportConfigMapName(node); err != nil || cm.Name != first {
			continue
		}
		var v ZoneVerdict
		if json.Unmarshal([]byte(raw), &v) != nil {
			continue
		}
		if v.EgressService != "" {
			esZones = append(esZones, node)
		}
		if v.EgressIP != "" {
			eipZones = append(eipZones, node)
		}
	}
	slices.Sort(esZones)
	slices.Sort(eipZones)
	return esZones, eipZones
}
