package kind

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// requireSharedGateway skips the --snat-backend=ovn scenarios outside
// shared gateway mode, where the pods' traffic does not leave through the
// gateway router that would carry the NAT rows.
func (e *env) requireSharedGateway() {
	if e.gatewayMode != "shared" {
		e.t.Skipf("--snat-backend=ovn SNATs on the host's gateway router, which the pods' egress crosses in shared gateway mode only; "+
			"this cluster runs %q gateway mode (hack/up.sh GATEWAY_MODE=shared; CI runs both)", e.gatewayMode)
	}
}

// TestGatewayBackend: with the translation on --snat-backend=ovn (the
// master's, or in interconnect every node agent's: setBackend) the SNAT is
// a NAT row on the host's gateway router (no host-side SNAT involved); pods
// on every node leave with the LB IP, the host and its NAT rows move with
// the selector. spec.network is not offered on this backend, so it is not
// exercised here.
func TestGatewayBackend(t *testing.T) {
	e := newEnv(t)
	e.requireSharedGateway()
	e.setBackend("ovn")
	t.Cleanup(func() { e.setBackend("host") })
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		a, b, c := e.nodes[0].Name, e.nodes[1].Name, e.nodes[2].Name
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p1, p3 := e.backend(svc+"-1", a, app), e.backend(svc+"-3", c, app)
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		e.label(b, selectorKey, "a")
		e.label(c, selectorKey, "b")
		e.egressService(svc, egressv1.EgressServiceSpec{NodeSelector: selectorOf("a")})
		e.waitHost(svc, hostTimeout, isHost(b))
		e.expectSource(p1, f, trafficTimeout, lb)
		e.expectSource(p3, f, trafficTimeout, lb)
		e.expectNAT(b, lb, p1.ips[f], true)

		e.updateEgressService(svc, func(s *egressv1.EgressServiceSpec) { s.NodeSelector = selectorOf("b") })
		e.waitHost(svc, hostTimeout, isHost(c))
		e.expectSource(p1, f, trafficTimeout, lb)
		e.expectSource(p3, f, trafficTimeout, lb)
		e.expectNAT(c, lb, p1.ips[f], true)
		e.expectNAT(b, lb, p1.ips[f], false)
	})
}

// expectNAT checks (eventually) whether GR_<node> has a NAT row mapping
// the endpoint to the LB IP, in the NB holding GR_<node> (in interconnect,
// node's own: the host's zone carries the NAT rows of every endpoint it
// serves, whichever zone the endpoint is in).
func (e *env) expectNAT(node string, lb, endpoint netip.Addr, present bool) {
	e.t.Helper()
	gr := "GR_" + node
	e.eventually("NAT rows of "+gr, hostTimeout, func() (bool, string) {
		out, err := e.nbctl(node, "lr-nat-list", gr)
		if err != nil {
			return false, err.Error()
		}
		has := false
		for _, line := range strings.Split(out, "\n") {
			// TYPE [GATEWAY_PORT] EXTERNAL_IP ... LOGICAL_IP ...: columns vary by OVN version.
			f := strings.Fields(line)
			if slices.Contains(f, "snat") && slices.Contains(f, lb.String()) && slices.Contains(f, endpoint.String()) {
				has = true
			}
		}
		return has == present, out
	})
}

// TestSwitchBackend: the translation (setBackend) moves from
// --snat-backend=host to ovn and back while the pods keep talking to the
// outside: every pod leaves with the LB IP after each switch, and no pod
// address leaves in between (the external echo's record is checked at the
// end).
func TestSwitchBackend(t *testing.T) {
	e := newEnv(t)
	e.requireSharedGateway()
	t.Cleanup(func() { e.setBackend("host") })
	type workload struct {
		f  corev1.IPFamily
		p  *pod
		lb netip.Addr
	}
	var ws []workload
	for _, f := range e.familyList() {
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p := e.backend(svc+"-1", e.nodes[0].Name, app)
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		e.egressService(svc, egressv1.EgressServiceSpec{})
		e.waitHost(svc, hostTimeout, anyNode)
		e.expectSource(p, f, trafficTimeout, lb)
		ws = append(ws, workload{f, p, lb})
	}
	for _, w := range ws {
		e.keepAsking(w.p, w.f)
	}
	for _, backend := range []string{"ovn", "host"} {
		e.setBackend(backend)
		for _, w := range ws {
			e.expectSource(w.p, w.f, trafficTimeout, w.lb)
		}
	}
}
