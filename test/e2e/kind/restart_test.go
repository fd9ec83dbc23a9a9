package kind

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// TestRestarts: the active master dies (its pod is deleted; the standby
// takes the Lease) and the host's node agent dies (the DaemonSet starts a
// new one): the hosts stay where they are, the pods keep leaving with the
// LB IP, and no pod address reaches the outside meanwhile. (Restarting
// ovn-kubernetes' NB is left to the local suite: on kind that database
// belongs to ovn-kubernetes.)
func TestRestarts(t *testing.T) {
	e := newEnv(t)
	type workload struct {
		f    corev1.IPFamily
		svc  string
		p    *pod
		lb   netip.Addr
		host string
	}
	var ws []workload
	for _, f := range e.familyList() {
		svc := "web-" + lower(f)
		app := map[string]string{"app": svc}
		p := e.backend(svc+"-1", e.nodes[0].Name, app)
		lb := e.loadBalancer(svc, f, app, false)
		e.advertise(svc)
		e.egressService(svc, egressv1.EgressServiceSpec{})
		host := e.waitHost(svc, hostTimeout, anyNode)
		e.expectSource(p, f, trafficTimeout, lb)
		ws = append(ws, workload{f, svc, p, lb, host})
	}
	for _, w := range ws {
		e.keepAsking(w.p, w.f)
	}

	e.waitMasterLeads()
	old := e.leader()
	e.deletePod(old)
	e.eventually("a new master leads", hostTimeout, func() (bool, string) {
		l := e.leader()
		return l != "" && l != old, "lease holder " + l
	})
	e.waitMasterLeads()
	for _, w := range ws {
		if h := e.waitHost(w.svc, hostTimeout, anyNode); h != w.host {
			t.Errorf("%s: host moved from %s to %s when the master restarted", w.svc, w.host, h)
		}
		e.expectSource(w.p, w.f, trafficTimeout, w.lb)
	}

	for _, w := range ws {
		name, _ := e.agentPod(w.host)
		if name == "" {
			t.Fatalf("no agent pod on host %s", w.host)
		}
		e.deletePod(name)
		e.waitAgent(w.host)
		e.expectSource(w.p, w.f, trafficTimeout, w.lb)
	}
}
