package translate

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// ReportAnnotation is the Node annotation where a node agent reported what
// it has programmed on its node before the report moved to its own
// ConfigMaps (ReportShardName): a Node's whole metadata is capped at 256
// KiB, about 3,000 services per host, and every report change was a Node
// update sent to every Node watcher. The master still reads it from a node
// whose ConfigMap does not exist (an agent of an older release during an
// upgrade); an agent that published its ConfigMap removes it.
//
// The report is the handshake that orders the host path
// (DESIGN §3): the master puts a service's endpoints into the host's reroute
// set only once the host's report matches what the master expects, and the
// agent withdraws an entry (then waits a grace period) before removing the
// host-side state behind it. No packet is rerouted to a host that cannot
// SNAT it.
//
// The value is a JSON object keyed by "namespace/name" of the EgressService:
//
//		{"ns1/svc1":{"ips":["172.18.0.100"],"network":"100","eps":"9a1f0c33d1e2b7a4"}}
//
//	  - ips: the SNAT addresses the agent programmed, one per family, sorted
//	    (absent for sourceIPBy=Network, which does not SNAT);
//	  - network: the spec.network the agent's ip rules use ("" = main routing);
//	  - eps: EndpointsHash of the endpoint addresses programmed for the service
//	    (for status.host ALL: the endpoints on this node only).
//
// The master compares ips and network with the Service; when eps differs
// (an endpoint change the agent has not applied yet) it keeps only the
// endpoints already in the NB set and adds new ones after the agent caught up.
const ReportAnnotation = "ovn-egress.io/programmed"

// The readiness report's own objects: ConfigMaps in the agents' namespace,
// labelled ReportLabel and ReportNodeLabel, their data ReportNodeKey (the
// node's name) and ReportDataKey (a part of the report, encoded as the
// annotation was). A ConfigMap holds 1 MiB, and an entry is 80–120 bytes
// with real names, so a host's report is split: entries fill the first
// part (ReportShardName(node, 0)) up to ReportShardBytes and go on into
// parts 1, 2, …, and an entry stays in its part while it is reported (an
// entry never moves, so no write order can make it vanish for a moment).
// The report is the union of the parts, at most ReportParts of them (the
// agents' admission policy refuses more: a stolen agent token cannot fill
// etcd or the master's cache with parts); that holds some 80,000 entries.
// The Node owns every part (ownerReference), so they go with the Node.
const (
	ReportLabel     = "ovn-egress.io/report"
	ReportNodeLabel = "ovn-egress.io/report-node" // ReportNodeHash(node): a node name may exceed a label value's 63 characters
	ReportNodeKey   = "node"
	ReportDataKey   = "programmed"
	// ReportShardBytes is what new entries may fill a part to; entries
	// that grow in place (a second family) have the rest of the 1 MiB.
	ReportShardBytes = 128 << 10
	// ReportParts is how many parts a host's report may have: parts 0 to
	// ReportParts-1 (dist/node/admission.yaml allows no other name).
	ReportParts  = 64
	reportPrefix = "ovn-egress-report"
)

// ReportShardName is the name of part i of node's report ConfigMaps:
// ovn-egress-report.<node> for the first, ovn-egress-report-<i>.<node>
// after it (the part never hides in the node name, which may hold dots).
func ReportShardName(node string, i int) (string, error) {
	name := reportPrefix + "." + node
	if i > 0 {
		name = fmt.Sprintf("%s-%d.%s", reportPrefix, i, node)
	}
	if longest := fmt.Sprintf("%s-%d.", reportPrefix, ReportParts-1); len(longest)+len(node) > 253 {
		return "", fmt.Errorf("node name %q is longer than %d characters: its readiness report's ConfigMap names would exceed 253", node, 253-len(longest))
	}
	return name, nil
}

// ReportConfigMapName is the name of the first part of node's report.
func ReportConfigMapName(node string) (string, error) { return ReportShardName(node, 0) }

// ReportNodeHash is node's ReportNodeLabel value.
func ReportNodeHash(node string) string {
	h := fnv.New64a()
	h.Write([]byte(node))
	return fmt.Sprintf("%016x", h.Sum64())
}

// ParseReportConfigMap reads a report ConfigMap: the node it is for, which
// part it is, and its entries.
func ParseReportConfigMap(cm *corev1.ConfigMap) (string, int, Report, error) {
	node := cm.Data[ReportNodeKey]
	part := -1
	if node != "" {
		if cm.Name == reportPrefix+"."+node {
			part = 0
		} else if rest, ok := strings.CutSuffix(cm.Name, "."+node); ok {
			if n, err := strconv.Atoi(strings.TrimPrefix(rest, reportPrefix+"-")); err == nil && n > 0 && rest == fmt.Sprintf("%s-%d", reportPrefix, n) {
				part = n
			}
		}
	}
	if part < 0 {
		return "", 0, nil, fmt.Errorf("ConfigMap %s/%s: data.%s %q does not name the node the ConfigMap is for", cm.Namespace, cm.Name, ReportNodeKey, node)
	}
	r, err := ParseReport(cm.Data[ReportDataKey])
	return node, part, r, err
}

// WithReports returns info with the report read from its node's report
// ConfigMaps when there are any (a copy; info itself is left as parsed
// from the Node, whose annotation an older agent release wrote).
func WithReports(info *NodeInfo, cms []*corev1.ConfigMap) *NodeInfo {
	if len(cms) == 0 {
		return info
	}
	out := *info
	out.Problems = slices.DeleteFunc(slices.Clone(info.Problems), func(p string) bool { return strings.HasPrefix(p, ReportAnnotation+": ") })
	out.Report = Report{}
	for _, cm := range cms {
		_, _, r, err := ParseReportConfigMap(cm)
		if err != nil {
			out.Problems = append(out.Problems, "readiness report: "+err.Error())
		}
		maps.Copy(out.Report, r)
	}
	return &out
}

// NodeReport is the report of node n: the union of its report ConfigMaps
// when it has any, else its Node's legacy annotation (nil n: none). An
// unreadable part counts as empty, with its error.
func NodeReport(n *corev1.Node, cms []*corev1.ConfigMap) (Report, error) {
	out := Report{}
	var errs []error
	if len(cms) == 0 && n != nil {
		r, err := ParseReport(n.Annotations[ReportAnnotation])
		return r, err
	}
	for _, cm := range cms {
		_, _, r, err := ParseReportConfigMap(cm)
		if err != nil {
			errs = append(errs, err)
		}
		maps.Copy(out, r)
	}
	return out, errors.Join(errs...)
}

// Report is a node agent's readiness report: one entry per EgressService.
type Report map[string]ServiceReport

// ServiceReport is what the agent programmed for one EgressService.
type ServiceReport struct {
	IngressIPs []string `json:"ips,omitempty"`
	Network    string   `json:"network,omitempty"`
	Endpoints  string   `json:"eps"`
}

// ParseReport decodes the annotation value.
func ParseReport(s string) (Report, error) {
	r := Report{}
	if strings.TrimSpace(s) == "" {
		return r, nil
	}
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Report{}, fmt.Errorf("invalid readiness report: %w", err)
	}
	return r, nil
}

// Encode renders the report deterministically (keys sorted).
func (r Report) Encode() string {
	if len(r) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(map[string]ServiceReport(r))
	return string(b)
}

// EndpointsHash is a short, order-independent digest of a set of addresses:
// FNV-1a 64 over the sorted canonical addresses, hex.
func EndpointsHash(ips []netip.Addr) string {
	s := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		s = append(s, ipfamily.Canonical(ip))
	}
	slices.SortFunc(s, func(a, b netip.Addr) int { return a.Compare(b) })
	s = slices.Compact(s)
	h := fnv.New64a()
	for _, ip := range s {
		h.Write([]byte(ip.String()))
		h.Write([]byte{','})
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// ReportIPs renders ingress IPs for a ServiceReport: one per family, sorted.
func ReportIPs(ips map[ipfamily.Family]netip.Addr) []string {
	var out []string
	for _, f := range ipfamily.All {
		if ip, ok := ips[f]; ok {
			out = append(out, ip.String())
		}
	}
	return out
}

// AgentEndpoints returns the endpoint addresses a node agent programs for an
// EgressService, and whose EndpointsHash it reports: with status.host ALL the
// endpoints on that node; otherwise the endpoints of every family that has
// an ingress IP (the families it SNATs). The master computes the same set to
// compare, so both sides call this one function.
func AgentEndpoints(host, node string, eps []Endpoint, ingress map[ipfamily.Family]netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, e := range eps {
		if host == HostAll {
			if e.Node == node {
				out = append(out, e.IP)
			}
			continue
		}
		if _, ok := ingress[ipfamily.Of(e.IP)]; ok {
			out = append(out, e.IP)
		}
	}
	return out
}

// HostAll is status.host for sourceIPBy=Network.
const HostAll = "ALL"
