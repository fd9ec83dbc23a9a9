package master

import (
	"fmt"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/record"

	eipclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/egressip"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/informer"
)

// ControllerEgressIP assigns the IPs of EgressIP objects to nodes and
// writes status.items. It runs only when Config.Controllers names it: it
// writes no NB rows and no SNAT yet (docs/egressip.md), so an assignment
// would not yet carry traffic.
const ControllerEgressIP = "egressip"

// buildEgressIP wires the EgressIP controller when it is asked for.
func (m *Master) buildEgressIP(cfg Config, c eipclient.Interface, log *logrus.Entry, recorder record.EventRecorder) error {
	if !cfg.runs(ControllerEgressIP) {
		return nil
	}
	if c == nil {
		return fmt.Errorf("controller %q needs the EgressIP client", ControllerEgressIP)
	}
	m.eipInf = informer.EgressIP(c)
	var err error
	m.eip, err = egressip.New(egressip.Config{Work: cfg.Sync.Work}, log.WithField("controller", "egressip"), c, m.kubeInf, m.eipInf, recorder)
	return err
}

// EgressIP exposes the EgressIP controller (tests); nil unless
// Config.Controllers names it.
func (m *Master) EgressIP() *egressip.Controller { return m.eip }
