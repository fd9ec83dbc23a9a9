package translate

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// ReportAnnotation is the Node annotation where a node agent reports what it
// has programmed on its node. It is the handshake that orders the host path
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
