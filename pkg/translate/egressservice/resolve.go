package egressservice

import (
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// One EgressService's own part of the translation: its objects parsed
// (serviceObjects), then resolved against the facts — the nodes, the
// gateways, the other services' claims on its endpoint addresses — into a
// mode, a host and the endpoints it may reroute (resolved).

// ServiceObjects are the objects one EgressService's rows are made of: the
// EgressService, its Service (nil: none) and the Service's EndpointSlices.
type ServiceObjects struct {
	EgressService *egressv1.EgressService
	Service       *corev1.Service
	Slices        []*discoveryv1.EndpointSlice
}

// serviceEntry is an EgressService's objects and what depends on them
// alone: the endpoints it claims.
type serviceEntry struct {
	key string
	ServiceObjects
	// claims are the Service's cluster-networked endpoints, when it is a
	// LoadBalancer Service: what it claims against other EgressServices
	// (resolveClaims gives each address to one of them).
	claims []translate.Endpoint
	// outside: some endpoint address lies outside the cluster subnets; the
	// problem that names it reads every node's pod subnets.
	outside bool
}

func newServiceEntry(cfg translate.Config, objs ServiceObjects) *serviceEntry {
	e := &serviceEntry{key: translate.EgressServiceKey(objs.EgressService), ServiceObjects: objs}
	if translate.IsLoadBalancer(objs.Service) {
		// Exactly as long as needed: an Index keeps every service's claims
		// (150,000 endpoints at the envelope, in every zone's agent).
		e.claims = slices.Clone(translate.ServiceEndpoints(objs.Service, objs.Slices, cfg.ClusterSubnets))
	}
	e.outside = hasOutside(objs.Service, objs.Slices, cfg.ClusterSubnets)
	return e
}

// sameVersions reports whether b's Service and slices are the very versions
// of a's (UID and resourceVersion, which the API server changes on every
// write): what depends on them alone stands. Objects without a
// resourceVersion (not from an API server) are never the same.
func sameVersions(a, b ServiceObjects) bool {
	same := func(x, y metav1.Object) bool {
		return x.GetResourceVersion() != "" && x.GetUID() == y.GetUID() && x.GetResourceVersion() == y.GetResourceVersion()
	}
	if (a.Service == nil) != (b.Service == nil) || len(a.Slices) != len(b.Slices) {
		return false
	}
	if a.Service != nil && !same(a.Service, b.Service) {
		return false
	}
	for i := range a.Slices {
		if a.Slices[i] == nil || b.Slices[i] == nil || !same(a.Slices[i], b.Slices[i]) {
			return false
		}
	}
	return true
}

// hasOutside reports whether a counted slice has an address outside the
// cluster subnets.
func hasOutside(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, clusterSubnets []netip.Prefix) bool {
	for _, s := range slices {
		if !translate.CountedSlice(svc, s) {
			continue
		}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && !translate.InAny(ipfamily.Canonical(ip), clusterSubnets) {
					return true
				}
			}
		}
	}
	return false
}

type mode int

const (
	modeNone    mode = iota // no host: nothing rerouted
	modeHost                // LoadBalancerIP, SNAT by the node agent
	modeGateway             // LoadBalancerIP, SNAT by NAT rows on GR_<host>
	modeNetwork             // sourceIPBy=Network, host ALL
)

// resolved is one EgressService resolved against the facts.
type resolved struct {
	*serviceEntry
	eps     []translate.Endpoint // the claims this service won
	ingress map[ipfamily.Family]netip.Addr
	mode    mode
	host    *translate.NodeInfo
	// problems found so far, each once.
	problems []translate.Problem
}

func (s *resolved) problem(r translate.Reason, format string, args ...any) {
	p := translate.Problem{Key: s.key, Reason: r, Message: fmt.Sprintf(format, args...)}
	for _, q := range s.problems {
		if q == p {
			return
		}
	}
	s.problems = append(s.problems, p)
}

// resolve finds the endpoints, ingress IPs, mode and host of one
// EgressService. winner says which EgressService an endpoint address
// belongs to (the first by namespace, then name, of those that claim it).
func (w *facts) resolve(e *serviceEntry, winner func(netip.Addr) string) *resolved {
	s := &resolved{serviceEntry: e}
	w.resolveMode(s)
	if len(e.claims) > 0 {
		s.eps = s.wonClaims(winner)
	}
	return s
}

// resolveMode finds the ingress IPs, mode and host.
func (w *facts) resolveMode(s *resolved) {
	e, es := s.serviceEntry, s.EgressService
	switch {
	case e.Service == nil:
		s.problem(translate.ReasonServiceNotFound, "Service %s not found", s.key)
		return
	case !translate.IsLoadBalancer(e.Service):
		s.problem(translate.ReasonServiceNotLoadBalancer, "Service %s is of type %s, not LoadBalancer", s.key, e.Service.Spec.Type)
		return
	}
	if e.outside {
		for _, m := range translate.MisplacedEndpoints(e.Service, e.Slices, w.cfg.ClusterSubnets, w.podSubnet) {
			s.problem(translate.ReasonEndpointOutsideClusterSubnets, "%s", m.Message(w.cfg.ClusterSubnets))
		}
	}
	if len(e.claims) == 0 {
		s.problem(translate.ReasonNoEndpoints, "Service %s has no cluster-networked endpoints", s.key)
		return
	}
	host := es.Status.Host
	if es.Spec.SourceIPBy == egressv1.Network {
		if host != egressv1.HostAll {
			s.problem(translate.ReasonNoHost, "sourceIPBy is Network but status.host is %q, not ALL", host)
			return
		}
		s.mode = modeNetwork
		return
	}
	var multiple []ipfamily.Family
	s.ingress, multiple = translate.IngressIPs(e.Service)
	for _, f := range multiple {
		s.problem(translate.ReasonMultipleIngressIPs, "Service %s has more than one %s ingress IP; %s is used", s.key, f.Name(), s.ingress[f])
	}
	if len(s.ingress) == 0 {
		s.problem(translate.ReasonNoIngressIP, "Service %s has no load-balancer ingress IP", s.key)
		return
	}
	// Host selection refuses these too (and node addresses, and an IP of
	// two namespaces); a status.host someone else wrote gets no rows either.
	nets := translate.IngressNetworks{ClusterSubnets: w.cfg.ClusterSubnets, JoinSubnets: w.cfg.JoinSubnets, ServiceCIDRs: w.cfg.ServiceCIDRs}
	for _, f := range ipfamily.All {
		if ip, ok := s.ingress[f]; ok {
			if why := nets.Refusal(ip, nil); why != "" {
				s.problem(translate.ReasonInvalidIngressIP, "load-balancer ingress IP %s %s: pods never leave with it", ip, why)
				s.ingress = nil
				return
			}
		}
	}
	switch n := w.nodes[host]; {
	case host == "":
		s.problem(translate.ReasonNoHost, "no host is assigned (status.host is empty)")
	case host == egressv1.HostAll || n == nil:
		s.problem(translate.ReasonUnknownHost, "status.host %q is not a known node", host)
	default:
		s.host = n
		s.mode = modeHost
		if w.cfg.Backend == translate.BackendOVN && es.Spec.Network == "" && n.SharedGateway() {
			s.mode = modeGateway
		}
	}
}

// wonClaims returns the claims the service won; each lost one is a
// problem naming the service that won it.
func (s *resolved) wonClaims(winner func(netip.Addr) string) []translate.Endpoint {
	var kept []translate.Endpoint // only allocated once an endpoint is lost
	for j, e := range s.claims {
		w := winner(e.IP)
		if w == s.key {
			if kept != nil {
				kept = append(kept, e)
			}
			continue
		}
		if kept == nil {
			kept = append(make([]translate.Endpoint, 0, len(s.claims)), s.claims[:j]...)
		}
		s.problem(translate.ReasonSharedEndpoint, "endpoint %s also backs EgressService %s, which takes precedence", e.IP, w)
	}
	if kept == nil {
		return s.claims
	}
	return kept
}

// compareServiceKeys orders "namespace/name" keys by namespace, then name:
// the order in which a shared endpoint goes to the first.
func compareServiceKeys(a, b string) int {
	an, aname, _ := strings.Cut(a, "/")
	bn, bname, _ := strings.Cut(b, "/")
	if c := strings.Compare(an, bn); c != 0 {
		return c
	}
	return strings.Compare(aname, bname)
}
