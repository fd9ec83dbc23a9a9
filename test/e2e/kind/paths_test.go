package kind

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestNetworkTable: spec.network "100" → the host's agent adds ip rules
// from the endpoints into table 100; the pods still leave with the LB IP,
// a blackhole for the external address in that table stops them and
// removing it restores them (so the traffic really uses table 100);
// deleting the EgressService gives them their nodes' addresses back.
func TestNetworkTable(t *testing.T) {
	e := newEnv(t)
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		for _, n := range e.nodes {
			e.routeTable100(n.Name, f)
		}
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p1 := e.backend(svc+"-1", e.nodes[0].Name, app)
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		e.egressService(svc, egressv1.EgressServiceSpec{Network: "100"})
		host := e.waitHost(svc, hostTimeout, anyNode)
		e.expectSource(p1, f, trafficTimeout, lb)

		rule := "from " + p1.ips[f].String() + " lookup 100"
		rules := e.onNode(host, "ip", familyFlag(f), "rule", "show")
		if !hasRule(rules, "5000:", rule) {
			t.Fatalf("ip rules on %s lack %q at priority 5000:\n%s", host, rule, rules)
		}
		e.blackhole100(host, f, true)
		e.expectBlocked(p1, f, 5*time.Second)
		e.blackhole100(host, f, false)
		e.expectSource(p1, f, trafficTimeout, lb)

		e.deleteEgressService(svc)
		e.waitLabelGone(svc)
		e.expectNodeSource(p1, f, trafficTimeout)
	})
}

// TestNetworkMode: sourceIPBy Network with network "100" → status.host
// ALL and no node label; each pod leaves from its own node, with that
// node's address, through table 100: a blackhole there on one node stops
// only that node's pods. ovn-kubernetes' local gateway mode masquerades
// the pods' traffic on the host; this needs that mode (CI's second job).
func TestNetworkMode(t *testing.T) {
	e := newEnv(t)
	if e.gatewayMode != "local" {
		t.Skipf("sourceIPBy: Network leaves through the node's own masquerade, which ovn-kubernetes sets up in local gateway mode; "+
			"this cluster runs %q gateway mode (hack/up.sh GATEWAY_MODE=local; CI runs both)", e.gatewayMode)
	}
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		for _, n := range e.nodes {
			e.routeTable100(n.Name, f)
		}
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p1, p3 := e.backend(svc+"-1", e.nodes[0].Name, app), e.backend(svc+"-3", e.nodes[2].Name, app)
		e.loadBalancer(svc, f, app, false)
		e.egressService(svc, egressv1.EgressServiceSpec{SourceIPBy: egressv1.Network, Network: "100"})
		e.waitHost(svc, hostTimeout, isHost(egressv1.HostAll))
		e.expectNodeSource(p1, f, trafficTimeout)
		e.expectNodeSource(p3, f, trafficTimeout)

		e.blackhole100(p1.node, f, true)
		e.expectBlocked(p1, f, 5*time.Second)
		e.expectNodeSource(p3, f, trafficTimeout)
		e.blackhole100(p1.node, f, false)
		e.expectNodeSource(p1, f, trafficTimeout)

		// Without the EgressService the main table is used: the blackhole
		// in table 100 no longer matters.
		e.blackhole100(p1.node, f, true)
		e.deleteEgressService(svc)
		e.expectNodeSource(p1, f, trafficTimeout)
		e.blackhole100(p1.node, f, false)
	})
}

// TestExternalTrafficPolicyLocal: with externalTrafficPolicy Local only a
// node with a local endpoint can be the host: the selected node has none →
// no host, no label, node addresses; an endpoint appears on it → it hosts
// and the pods leave with the LB IP; the endpoint goes → no host again.
func TestExternalTrafficPolicyLocal(t *testing.T) {
	e := newEnv(t)
	e.families(func(t *testing.T, f corev1.IPFamily) {
		e := e.sub(t)
		selected, other := e.nodes[0].Name, e.nodes[1].Name
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p := e.backend(svc+"-other", other, app)
		lb := e.loadBalancer(svc, f, app, true)
		e.advertise(svc)
		e.label(selected, selectorKey, "etp")
		e.egressService(svc, egressv1.EgressServiceSpec{NodeSelector: selectorOf("etp")})
		time.Sleep(5 * time.Second) // the master has seen it and decided
		e.waitHost(svc, hostTimeout, isHost(""))
		e.expectNodeSource(p, f, trafficTimeout)

		local := e.backend(svc+"-local", selected, app)
		e.waitHost(svc, hostTimeout, isHost(selected))
		e.expectSource(p, f, trafficTimeout, lb)
		e.expectSource(local, f, trafficTimeout, lb)

		e.deleteDeployment(local.deploy)
		e.waitHost(svc, hostTimeout, isHost(""))
		e.expectNodeSource(p, f, trafficTimeout)
	})
}

// hasRule reports whether `ip rule show` output has a rule at prio (like
// "5000:") containing want.
func hasRule(out, prio, want string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), prio) && strings.Contains(line, want) {
			return true
		}
	}
	return false
}
