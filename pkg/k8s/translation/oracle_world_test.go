package translation_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	egressfake "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned/fake"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// world is the oracle's cluster: the objects live in client-go's fake
// clientsets (the controller's informers watch them), the topology in a
// real NB. Every change is random but drawn from seed, so a failing seed
// replays.
type world struct {
	t      testing.TB
	rnd    *rand.Rand
	topo   testenv.Topology
	kube   *kubefake.Clientset
	egress *egressfake.Clientset
	o      *testenv.OVN
	cfg    translate.Config
	// renumbered counts the node renumberings (each gives fresh addresses).
	renumbered int
	log        []string
}

const (
	reportNS = "ovn-egress"
	// names of the services: few, so that changes meet (shared ingress IPs,
	// shared endpoints, moves onto the same host).
	services = 6
)

var namespaces = []string{"a", "b"}

func (w *world) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *world) pick(n int) int { return w.rnd.IntN(n) }

func (w *world) ctx() context.Context { return context.Background() }

// node returns a random node's name.
func (w *world) node() string { return w.topo.Nodes[w.pick(len(w.topo.Nodes))].Name }

// host is a value for status.host: a node, none, or now and then a node
// that does not exist.
func (w *world) host() string {
	switch r := w.pick(10); {
	case r == 0:
		return ""
	case r == 1:
		return "node9"
	default:
		return w.node()
	}
}

// ingress returns a load-balancer IP of each family: a small pool, so two
// services (of one namespace or two) now and then share one.
func (w *world) ingress() []string {
	var out []string
	for _, f := range w.topo.Families {
		k := 100 + w.pick(5)
		if f == ipfamily.V4 {
			out = append(out, fmt.Sprintf("172.18.200.%d", k))
		} else {
			out = append(out, fmt.Sprintf("fc00:f853:ccd:e793::c8:%x", k))
		}
	}
	return out
}

// endpoints returns 0–4 pod addresses on random nodes ("ip@node"): pods
// 10–13 of a node's subnet, so two services now and then share a pod.
func (w *world) endpoints() []string {
	var out []string
	for range w.pick(5) {
		n := w.topo.Nodes[w.pick(len(w.topo.Nodes))]
		k := 10 + w.pick(4)
		for _, f := range w.topo.Families {
			out = append(out, n.PodIP(f, k).String()+"@"+n.Name)
		}
	}
	return out
}

func serviceName(i int) string { return fmt.Sprintf("svc%d", i) }

// step makes one random change to the cluster's objects.
func (w *world) step() {
	ns, name := namespaces[w.pick(len(namespaces))], serviceName(w.pick(services))
	switch r := w.pick(100); {
	case r < 15:
		w.createService(ns, name)
	case r < 22:
		w.deleteEgressService(ns, name)
	case r < 27:
		w.deleteService(ns, name)
	case r < 47:
		w.setHost(ns, name, w.host())
	case r < 67:
		w.setEndpoints(ns, name, w.endpoints())
	case r < 75:
		w.setIngress(ns, name, w.ingress())
	case r < 77:
		w.renumberNode(w.pick(len(w.topo.Nodes)))
	case r < 80:
		w.changeThenMove(ns, name)
	case r < 84:
		w.recreateNode(w.pick(len(w.topo.Nodes)))
	default:
		w.report(w.node())
	}
}

func (w *world) must(what string, err error) {
	w.t.Helper()
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) {
		w.t.Fatalf("%s: %v", what, err)
	}
}

func (w *world) createService(ns, name string) {
	ing, eps, host := w.ingress(), w.endpoints(), w.host()
	w.logf("create %s/%s ingress %v endpoints %v host %q", ns, name, ing, eps, host)
	_, err := w.kube.CoreV1().Services(ns).Create(w.ctx(), testenv.LoadBalancerService(ns, name, ing...), metav1.CreateOptions{})
	w.must("create service", err)
	w.writeSlices(ns, name, eps)
	_, err = w.egress.K8sV1().EgressServices(ns).Create(w.ctx(), testenv.EgressService(ns, name, host), metav1.CreateOptions{})
	w.must("create egressservice", err)
}

func (w *world) deleteEgressService(ns, name string) {
	w.logf("delete egressservice %s/%s", ns, name)
	w.must("delete egressservice", w.egress.K8sV1().EgressServices(ns).Delete(w.ctx(), name, metav1.DeleteOptions{}))
}

func (w *world) deleteService(ns, name string) {
	w.logf("delete service %s/%s", ns, name)
	w.must("delete service", w.kube.CoreV1().Services(ns).Delete(w.ctx(), name, metav1.DeleteOptions{}))
}

func (w *world) setHost(ns, name, host string) {
	es, err := w.egress.K8sV1().EgressServices(ns).Get(w.ctx(), name, metav1.GetOptions{})
	if err != nil {
		return
	}
	w.logf("host of %s/%s: %q → %q", ns, name, es.Status.Host, host)
	es.Status.Host = host
	_, err = w.egress.K8sV1().EgressServices(ns).UpdateStatus(w.ctx(), es, metav1.UpdateOptions{})
	w.must("set host", err)
}

func (w *world) setIngress(ns, name string, ing []string) {
	svc, err := w.kube.CoreV1().Services(ns).Get(w.ctx(), name, metav1.GetOptions{})
	if err != nil {
		return
	}
	w.logf("ingress of %s/%s → %v", ns, name, ing)
	svc.Status = testenv.LoadBalancerService(ns, name, ing...).Status
	_, err = w.kube.CoreV1().Services(ns).UpdateStatus(w.ctx(), svc, metav1.UpdateOptions{})
	w.must("set ingress", err)
}

func (w *world) setEndpoints(ns, name string, eps []string) {
	w.logf("endpoints of %s/%s → %v", ns, name, eps)
	w.writeSlices(ns, name, eps)
}

// writeSlices replaces the service's EndpointSlices (one per family, as
// the EndpointSlice controller keeps them; a family without endpoints has
// no slice).
func (w *world) writeSlices(ns, name string, eps []string) {
	want := testenv.EndpointSlices(ns, name, eps...)
	client := w.kube.DiscoveryV1().EndpointSlices(ns)
	for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		sliceName := fmt.Sprintf("%s-%s", name, strings.ToLower(string(at)))
		i := slices.IndexFunc(want, func(s *discoveryv1.EndpointSlice) bool { return s.Name == sliceName })
		if i < 0 {
			w.must("delete slice", client.Delete(w.ctx(), sliceName, metav1.DeleteOptions{}))
			continue
		}
		if _, err := client.Update(w.ctx(), want[i], metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = client.Create(w.ctx(), want[i], metav1.CreateOptions{})
			w.must("create slice", err)
		} else {
			w.must("update slice", err)
		}
	}
}

// renumberNode gives node i a new pod subnet and new host addresses (what
// translation reads of a Node: its management IP, the next hop, follows
// the subnet; its addresses are allowed destinations).
func (w *world) renumberNode(i int) {
	w.renumbered++
	n := &w.topo.Nodes[i]
	k := 100 + w.renumbered%100
	for j, f := range w.topo.Families {
		if f == ipfamily.V4 {
			n.Subnets[j] = netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", k))
			n.HostIPs[j] = netip.MustParsePrefix(fmt.Sprintf("172.18.1.%d/16", k))
		} else {
			n.Subnets[j] = netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%x::/64", k))
			n.HostIPs[j] = netip.MustParsePrefix(fmt.Sprintf("fc00:f853:ccd:e793::1:%x/64", k))
		}
	}
	w.logf("renumber %s: subnets %v host %v", n.Name, n.Subnets, n.HostIPs)
	_, err := w.kube.CoreV1().Nodes().Update(w.ctx(), w.topo.NodeObject(*n), metav1.UpdateOptions{})
	w.must("renumber node", err)
}

// changeThenMove changes node i in a way that makes its key be walked in
// full (its addresses, or its agent's report) and at once moves a service
// onto it: both usually reach the controller before one sync, which must
// still walk the node in full (a move alone would list only the moved
// service).
func (w *world) changeThenMove(ns, name string) {
	i := w.pick(len(w.topo.Nodes))
	if w.pick(2) == 0 {
		w.renumberNode(i)
	} else {
		w.report(w.topo.Nodes[i].Name)
	}
	w.setHost(ns, name, w.topo.Nodes[i].Name)
}

// recreateNode deletes node i and, most times, creates it again.
func (w *world) recreateNode(i int) {
	n := w.topo.Nodes[i]
	w.must("delete node", w.kube.CoreV1().Nodes().Delete(w.ctx(), n.Name, metav1.DeleteOptions{}))
	if w.pick(4) == 0 {
		w.logf("delete node %s (and create it again in a later step)", n.Name)
		return
	}
	w.logf("recreate node %s", n.Name)
	_, err := w.kube.CoreV1().Nodes().Create(w.ctx(), w.topo.NodeObject(n), metav1.CreateOptions{})
	w.must("create node", err)
}

// report writes node's readiness report: for each EgressService, what the
// agent would report now, an older report, or nothing.
func (w *world) report(node string) {
	r := translate.Report{}
	list, err := w.egress.K8sV1().EgressServices("").List(w.ctx(), metav1.ListOptions{})
	w.must("list egressservices", err)
	for i := range list.Items {
		es := &list.Items[i]
		switch w.pick(3) {
		case 0:
			continue
		case 1:
			r[translate.EgressServiceKey(es)] = translate.ServiceReport{Endpoints: fmt.Sprintf("stale-%d", w.pick(1000))}
		default:
			r[translate.EgressServiceKey(es)] = w.reportFor(node, es)
		}
	}
	w.logf("report of %s: %s", node, r.Encode())
	w.writeReport(node, r)
}

// writeReport writes node's report ConfigMap.
func (w *world) writeReport(node string, r translate.Report) {
	name, err := translate.ReportConfigMapName(node)
	w.must("report name", err)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: reportNS,
		Labels: map[string]string{translate.ReportLabel: "", translate.ReportNodeLabel: translate.ReportNodeHash(node)}},
		Data: map[string]string{translate.ReportNodeKey: node, translate.ReportDataKey: r.Encode()}}
	cms := w.kube.CoreV1().ConfigMaps(reportNS)
	if _, err := cms.Update(w.ctx(), cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = cms.Create(w.ctx(), cm, metav1.CreateOptions{})
		w.must("create report", err)
	} else {
		w.must("update report", err)
	}
}

// reportFor is what node's agent reports for es once it has programmed it
// (testenv.Kube.ReportFor, on the fake clientsets).
func (w *world) reportFor(node string, es *egressv1.EgressService) translate.ServiceReport {
	svc, err := w.kube.CoreV1().Services(es.Namespace).Get(w.ctx(), es.Name, metav1.GetOptions{})
	if err != nil {
		return translate.ServiceReport{Endpoints: "no-service"}
	}
	sl := w.objects().EndpointSlices
	sl = slices.DeleteFunc(sl, func(s *discoveryv1.EndpointSlice) bool {
		return s.Namespace != es.Namespace || s.Labels[discoveryv1.LabelServiceName] != es.Name
	})
	eps := translate.ServiceEndpoints(svc, sl, w.cfg.ClusterSubnets)
	ingress, _ := translate.IngressIPs(svc)
	return translate.ServiceReport{Network: es.Spec.Network, IngressIPs: translate.ReportIPs(ingress),
		Endpoints: translate.EndpointsHash(translate.AgentEndpoints(es.Status.Host, node, eps, ingress))}
}

// objects lists the world as it is now, from the clientsets themselves
// (never from the controller's informers).
func (w *world) objects() translate.Objects {
	var objs translate.Objects
	ess, err := w.egress.K8sV1().EgressServices("").List(w.ctx(), metav1.ListOptions{})
	w.must("list egressservices", err)
	for i := range ess.Items {
		objs.EgressServices = append(objs.EgressServices, &ess.Items[i])
	}
	svcs, err := w.kube.CoreV1().Services("").List(w.ctx(), metav1.ListOptions{})
	w.must("list services", err)
	for i := range svcs.Items {
		objs.Services = append(objs.Services, &svcs.Items[i])
	}
	sls, err := w.kube.DiscoveryV1().EndpointSlices("").List(w.ctx(), metav1.ListOptions{})
	w.must("list slices", err)
	for i := range sls.Items {
		objs.EndpointSlices = append(objs.EndpointSlices, &sls.Items[i])
	}
	nodes, err := w.kube.CoreV1().Nodes().List(w.ctx(), metav1.ListOptions{})
	w.must("list nodes", err)
	for i := range nodes.Items {
		objs.Nodes = append(objs.Nodes, &nodes.Items[i])
	}
	cms, err := w.kube.CoreV1().ConfigMaps(reportNS).List(w.ctx(), metav1.ListOptions{})
	w.must("list reports", err)
	for i := range cms.Items {
		objs.Reports = append(objs.Reports, &cms.Items[i])
	}
	return objs
}
