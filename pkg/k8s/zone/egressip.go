package zone

import (
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"

	eipinformers "github.com/ovn-egress/ovn-egress/pkg/k8s/client/egressip/informers/externalversions"
	"github.com/ovn-egress/ovn-egress/pkg/k8s/egressip"
)

// wireEgressIP adds the zone's EgressIP rows controller on the zone's NB
// (the master assigns the IPs; the EgressService translation was given the
// EgressIP informer for the egress nodes' cluster routes).
func (t *Translator) wireEgressIP(eipInf eipinformers.SharedInformerFactory, kubeInf kubeinformers.SharedInformerFactory, recorder record.EventRecorder) error {
	rcfg := egressip.RowsConfig{Translate: t.cfg.Translation.Translate, MaxOps: t.cfg.Translation.MaxOps, ResyncInterval: t.cfg.Translation.ResyncInterval,
		Work: t.cfg.Translation.Work, NB: t.cfg.Translation.NB, Zone: t.cfg.Translation.Zone, Standoff: t.det}
	rows, err := egressip.NewRows(rcfg, t.log.WithField("controller", "egressip-rows").WithField("zone", t.cfg.Translation.Zone), t.nb, kubeInf, eipInf, recorder)
	t.eipRows = rows
	return err
}
