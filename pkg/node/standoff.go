package node

import (
	"context"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ReasonOVNKubernetesConflict is the Warning Event on the agent's Node while
// ovn-kubernetes' own egress-service node controller has its nftables chain
// here (the reason the master and the zones use for the same conflict).
const ReasonOVNKubernetesConflict = "OVNKubernetesConflict"

// ReasonAnotherInstance is the Warning Event on the agent's Node while
// another install of ovn-egress holds the node's zone NB (interconnect):
// that install's agent programs this node, and two agents would undo each
// other's nftables elements and ip rules.
const ReasonAnotherInstance = "AnotherInstance"

// standBackPoll is how often an agent that stands back looks again whether
// ovn-kubernetes' chain is gone (nothing else tells it).
const standBackPoll = 5 * time.Second

// standingBack reports whether ovn-kubernetes' own egress-service feature
// has its chain or maps in this node's namespace (NodeLeftovers). While it
// does, the agent writes nothing — no SNAT element, ip rule or report
// change: ovnkube-node's controller owns ip rule priority 5000 too and
// deletes the rules it does not know, so two writers would undo each other.
// The feature's chain exists while the feature runs and after it is turned
// off until `ovn-egress migrate --apply` removes it (docs/migration.md). The
// first sync that finds it records a Warning on the Node; the agent looks
// again every standBackPoll and resumes once it is gone.
func (c *Controller) standingBack(ctx context.Context) (bool, error) {
	if c.otherInstanceHolds() {
		return true, nil
	}
	if c.d.OVNKube == nil {
		return false, nil
	}
	var ls []NodeLeftover
	if err := c.d.Namespace.Do(func() (err error) {
		ls, err = NodeLeftovers(ctx, c.d.OVNKube)
		return err
	}); err != nil {
		return false, err
	}
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Kind + " " + l.Name
	}
	found := strings.Join(names, ", ")
	switch {
	case found == "" && c.standoff != "":
		c.log.WithField("was", c.standoff).Info("ovn-kubernetes' egress-service nftables objects are gone; the agent resumes writing")
		c.standoff = ""
	case found != "" && found != c.standoff:
		c.standoff = found
		var what []string
		for _, l := range ls {
			what = append(what, l.String())
		}
		msg := "node " + c.cfg.NodeName + ": ovn-kubernetes' own egress-service feature has " + strings.Join(what, ", ") +
			": the agent programs nothing until they are gone (turn the feature off and run `ovn-egress migrate --apply`)"
		c.log.WithField("reason", ReasonOVNKubernetesConflict).Warn(msg)
		if n, err := c.nodeLister.Get(c.cfg.NodeName); err == nil {
			c.d.Recorder.Event(n, corev1.EventTypeWarning, ReasonOVNKubernetesConflict, msg)
		}
	}
	if found != "" {
		c.work.AddAfter(syncKey, standBackPoll)
	}
	return found != "", nil
}

// otherInstanceHolds reports whether another install holds this node's
// zone NB (Config.ZoneClaim), recording a Warning on the Node when that
// starts or changes. The relay wakes the agent when it ends.
func (c *Controller) otherInstanceHolds() bool {
	if c.cfg.ZoneClaim == nil {
		return false
	}
	other := c.cfg.ZoneClaim.ForeignInstance()
	switch {
	case other == "" && c.otherInstance != "":
		c.log.WithField("was", c.otherInstance).Info("no other ovn-egress install holds this node's zone any more; the agent resumes writing")
	case other != "" && other != c.otherInstance:
		msg := "node " + c.cfg.NodeName + ": another ovn-egress install, " + strconv.Quote(other) + ", holds this node's zone NB, " +
			"and its agent programs this node: this agent writes nothing (run one install; docs/operations.md#uninstalling)"
		c.log.WithField("reason", ReasonAnotherInstance).Warn(msg)
		if n, err := c.nodeLister.Get(c.cfg.NodeName); err == nil {
			c.d.Recorder.Event(n, corev1.EventTypeWarning, ReasonAnotherInstance, msg)
		}
	}
	c.otherInstance = other
	return other != ""
}
