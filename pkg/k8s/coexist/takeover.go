package coexist

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	egressclient "github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

// TakeOverManager is the field manager a take-over writes status.host with
// (one of ovn-egress's own).
const TakeOverManager = "ovn-egress-migrate"

// HeldStatus is one EgressService whose status.host a foreign manager owns.
type HeldStatus struct {
	Key, Host string
	Writer    StatusWriter
}

// ForeignStatuses lists the EgressServices whose status.host a foreign
// field manager owns (ForeignStatusWriter), sorted by key.
func ForeignStatuses(ctx context.Context, c egressclient.Interface) ([]HeldStatus, []*egressv1.EgressService, error) {
	list, err := c.K8sV1().EgressServices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list egressservices: %w", err)
	}
	var out []HeldStatus
	var objs []*egressv1.EgressService
	for i := range list.Items {
		es := &list.Items[i]
		if w, foreign := ForeignStatusWriter(es.ManagedFields); foreign {
			out = append(out, HeldStatus{Key: translate.EgressServiceKey(es), Host: es.Status.Host, Writer: w})
			objs = append(objs, es)
		}
	}
	return out, objs, nil
}

// TakeOver makes ovn-egress an owner of es's status.host without changing
// its value (a server-side apply of the current value: the field is then
// shared with the writer before), so that the master's hold on it ends and
// it decides the host again: no host moves by the take-over itself. A later
// write of another value by the other writer holds it again.
func TakeOver(ctx context.Context, c egressclient.Interface, es *egressv1.EgressService) error {
	body, err := json.Marshal(map[string]any{"apiVersion": "k8s.ovn.org/v1", "kind": "EgressService",
		"metadata": map[string]any{"name": es.Name, "namespace": es.Namespace},
		"status":   map[string]any{"host": es.Status.Host}})
	if err != nil {
		return err
	}
	force := true // the value is the current one: no conflict to force, but a changed object's must not fail
	_, err = c.K8sV1().EgressServices(es.Namespace).Patch(ctx, es.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: TakeOverManager, Force: &force}, "status")
	if err != nil {
		return fmt.Errorf("take over status.host of %s: %w", translate.EgressServiceKey(es), err)
	}
	return nil
}
