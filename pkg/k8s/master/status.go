package master

import (
	"github.com/sirupsen/logrus"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/status"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// buildStatus wires the status controller: host selection's problems (set
// once selection is built), the agents' reports, and MetalLB's
// ServiceL2Statuses once the API serves them.
func (m *Master) buildStatus(cfg Config, cl Clients, log *logrus.Entry) error {
	if m.repInf == nil {
		m.repInf = informer.Reports(cl.Kube, cfg.ReportNamespace)
	}
	scfg := status.Config{ClusterSubnets: cfg.Translation.Translate.ClusterSubnets, Reports: m.repInf.Core().V1().ConfigMaps(),
		Standoff: m.coexist, Work: cfg.Translation.Work, HostProblems: hostProblems{m}}
	if cl.Dynamic != nil {
		scfg.Discovery, scfg.Dynamic = cl.Kube.Discovery(), cl.Dynamic
	}
	var err error
	m.status, err = status.New(scfg, log.WithField("controller", status.Name), cl.Egress, m.kubeInf, m.egInf)
	return err
}

// hostProblems reads host selection's problems once it is built.
type hostProblems struct{ m *Master }

func (h hostProblems) HostProblems(key string) translate.Problems {
	if h.m.sel == nil {
		return nil
	}
	return h.m.sel.HostProblems(key)
}

// HostsDecided: without host selection in this process nothing is waited
// for.
func (h hostProblems) HostsDecided() bool { return h.m.sel == nil || h.m.sel.HostsDecided() }
