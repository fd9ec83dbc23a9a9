package selection_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/selection"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TestSelectorMovesDamped: against a real API server, a tenant's first
// selector change moves the host at once; a second one right after keeps
// the host (HostMoveDamped, read back while the damping lasts) and moves it
// when the damping is over; a node label change under an unchanged
// selector moves it at once, damping or not.
func TestSelectorMovesDamped(t *testing.T) {
	const damping = 3 * time.Second
	e := newEnv(t)
	c, _ := e.start(selection.Config{SelectorMoveDamping: damping}, kube.Config)
	// The label the last part selects by, set now: the hostname selectors
	// before it ignore it, and the controller's Node cache has it long
	// before that part. (Set just before the selector change, it raced
	// the controller's Node informer: the change was decided without
	// node3's label, so node3 seemed not to match the new selector, a
	// damped selector move — read back as a damped node label change.)
	for _, n := range []string{"node1", "node3"} {
		e.setNodeLabel(n, "egress", "yes")
	}
	t.Cleanup(func() {
		for _, n := range []string{"node1", "node3"} {
			e.setNodeLabel(n, "egress", "")
		}
	})
	e.create("web", []string{"172.18.0.100"}, []string{"10.244.1.5@node1"}, onNode("node1"))
	e.waitHost("web", "node1")

	// The first move is recorded after this change was written, so no
	// damped move can come sooner than damping after it.
	changed := time.Now()
	e.updateSpec("web", onNode("node2"))
	e.waitHost("web", "node2")
	e.updateSpec("web", onNode("node3"))
	e.waitEvent("web", translate.ReasonHostMoveDamped, "host node2 no longer matches spec.nodeSelector but stays")
	if h := e.host("web"); h != "node2" && time.Since(changed) < damping {
		t.Errorf("within the damping the host is %s; want node2 kept", h)
	}
	e.waitHost("web", "node3")
	if d := time.Since(changed); d < damping {
		t.Errorf("the damped move came %v after the first selector change; want no sooner than %v", d, damping)
	}

	// A selector change the host still matches, right after the move: no
	// move. Then, under that selector, node3 loses its label: left at once.
	syncs := c.Stats().Syncs
	e.updateSpec("web", withSelector(map[string]string{"egress": "yes"}))
	e.eventually("the selector change decided", func() bool { return c.Stats().Syncs > syncs })
	e.settle(c)
	e.setNodeLabel("node3", "egress", "")
	e.waitHost("web", "node1")
	for _, ev := range e.events("web") {
		if ev.Reason == string(translate.ReasonHostMoveDamped) && strings.Contains(ev.Message, "host node3") {
			t.Errorf("a node label change was damped: %s", ev.Message)
		}
	}
}

// setNodeLabel sets (value != "") or removes a label of a Node.
func (e *env) setNodeLabel(node, key, value string) {
	e.t.Helper()
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	if _, err := kube.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}
