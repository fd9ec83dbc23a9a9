package master

import (
	eipt "github.com/ovn-egress/ovn-egress/pkg/translate/egressip"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/record"

	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/egressip"
)

// ControllerEgressIP assigns the IPs of EgressIP objects to nodes, writes
// status.items and, with one central NB and translation beside it, has
// the translation controller write the EgressIPs' NB rows too; in interconnect each node agent writes its zone's
// (ovn-egress node --zone, --egressip). It runs only when
// Config.Controllers names it (docs/egressip.md).
const ControllerEgressIP = "egressip"

// buildEgressIP wires the EgressIP assignment controller when it is asked
// for (its rows are the translation controller's: Config.EgressIP).
func (m *Master) buildEgressIP(cfg Config, c eipclient.Interface, nb client.Client, log *logrus.Entry, recorder record.EventRecorder) error {
	if !cfg.runs(ControllerEgressIP) {
		return nil
	}
	ecfg := egressip.Config{Work: cfg.Translation.Work, Standoff: m.coexist}
	if m.sel != nil {
		ecfg.Unreachable, ecfg.Recovering = m.sel.Unreachable, m.sel.Recovering
	}
	var err error
	m.eip, err = egressip.New(ecfg, log.WithField("controller", "egressip"), c, m.kubeInf, m.eipInf, recorder)
	switch {
	case err != nil:
	case cfg.Mode == ModeIC:
		log.Info("EgressIP: assigning IPs; each node agent writes its interconnect zone's rows (--egressip)")
	case nb == nil || !cfg.runs(ControllerTranslation):
		log.Warn("EgressIP: assigning IPs only; no NB rows are written without one central NB and the translation controller")
	}
	return err
}

// probeEgressNodes has host selection's health checks probe the
// egress-assignable nodes too, and tell the EgressIP controller of every
// verdict change, when both controllers run: one prober, one drain rule.
func (m *Master) probeEgressNodes(cfg *Config) {
	if !cfg.runs(ControllerEgressIP) {
		return
	}
	nodes := m.kubeInf.Core().V1().Nodes().Lister()
	assignable := labels.Everything()
	if req, err := labels.NewRequirement(eipt.LabelEgressAssignable, selection.Exists, nil); err == nil {
		assignable = labels.NewSelector().Add(*req)
	}
	cfg.Select.AlsoProbe = func() []string {
		list, _ := nodes.List(assignable)
		out := make([]string, 0, len(list))
		for _, n := range list {
			out = append(out, n.Name)
		}
		return out
	}
	cfg.Select.OnReachability = func(string, bool) {
		if m.eip != nil {
			m.eip.Enqueue()
		}
	}
}

// EgressIP exposes the EgressIP controller (tests); nil unless
// Config.Controllers names it.
func (m *Master) EgressIP() *egressip.Controller { return m.eip }
