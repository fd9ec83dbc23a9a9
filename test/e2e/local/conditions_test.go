package local

import (
	"fmt"
	"strings"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/translate/conditions"
	"github.com/ovn-egress/ovn-egress/pkg/translate/hosts"
)

// kubectlWait runs what an operator runs: kubectl wait on the
// EgressService for a condition ("Ready", "Ready=false") or a jsonpath
// value, and fails the test with the object's conditions when it times out.
func (c *cluster) kubectlWait(name, forWhat string, timeout time.Duration) {
	c.t.Helper()
	c.kubectlWaitOn([]string{"-n", c.ns, "egressservice/" + name}, forWhat, timeout)
}

// kubectlWaitOn is kubectlWait for any object (kubectl's arguments that
// name it: a namespace flag and KIND/NAME, or a cluster-scoped KIND/NAME).
func (c *cluster) kubectlWaitOn(object []string, forWhat string, timeout time.Duration) {
	c.t.Helper()
	args := append(append([]string{"wait"}, object...), "--for="+forWhat, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	out, err := kube.Kubectl(args...)
	if err != nil {
		conds, _ := kube.Kubectl(append(append([]string{"get"}, object...), "-o", "jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{\"\\n\"}{end}")...)
		c.t.Fatalf("kubectl wait --for=%s %v: %v %s\nconditions:\n%s", forWhat, object, err, out, conds)
	}
}

// waitReadyReason waits until Ready is False with reason, and returns the
// message.
func (c *cluster) waitReadyReason(name, reason string) string {
	c.t.Helper()
	c.kubectlWait(name, `jsonpath={.status.conditions[?(@.type=="Ready")].reason}=`+reason, 30*time.Second)
	c.kubectlWait(name, "condition=Ready=false", 5*time.Second)
	msg, _ := kube.Kubectl("get", "-n", c.ns, "egressservice/"+name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].message}`)
	return strings.TrimSpace(msg)
}

// announceFromOtherNode points the Service's L2Advertisement at node (a
// label of its own instead of ovn-egress's host label: a selector that
// does not follow the host), checks that the EgressService says so, and
// restores the advertisement.
func (c *cluster) announceFromOtherNode(name, host, node string) {
	c.t.Helper()
	c.label(node, "announce-here", "yes")
	adv := "l2advertisement/egress-" + c.ns + "-" + name
	patch := func(labels string) {
		c.t.Helper()
		if out, err := kube.Kubectl("patch", "-n", testenv.MetalLBNamespace, adv, "--type=merge",
			"-p", `{"spec":{"nodeSelectors":[{"matchLabels":{`+labels+`}}]}}`); err != nil {
			c.t.Fatalf("patch %s: %v %s", adv, err, out)
		}
	}
	patch(`"announce-here":"yes"`)
	msg := c.waitReadyReason(name, conditions.ReasonAnnouncedElsewhere)
	if !strings.Contains(msg, "from "+node+", not from the host "+host) {
		c.t.Errorf("Ready's message %q does not name the announcer %s and the host %s", msg, node, host)
	}
	patch(fmt.Sprintf("%q:\"\"", hosts.NodeLabel(c.ns, name)))
	c.label(node, "announce-here", "")
	c.kubectlWait(name, "condition=Ready", 30*time.Second)
}
