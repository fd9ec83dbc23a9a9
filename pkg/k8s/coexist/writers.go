package coexist

import (
	"bytes"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OwnManagerPrefix starts the field manager of every ovn-egress writer
// (ovn-egress-selection, ovn-egress-egressip, ovn-egress-migrate, …).
const OwnManagerPrefix = "ovn-egress"

// operatorManagerPrefix starts kubectl's field managers (kubectl-patch,
// kubectl-edit, kubectl-client-side-apply): an operator's own write of
// status.host is a request to decide again, not a rival controller.
const operatorManagerPrefix = "kubectl"

// DefaultHold is how long a foreign status.host write holds its service:
// ovn-kubernetes' cluster-manager, when its feature is on, writes its rows
// into the zones' NBs within seconds of its status write, and those rows
// then stand everything back by themselves.
const DefaultHold = 2 * time.Minute

// StatusWriter is the foreign field manager that owns an EgressService's
// status.host, and when it last wrote (the managedFields entry's time).
type StatusWriter struct {
	Manager string
	Time    string
}

// ForeignStatusWriter returns the field manager that owns status.host of
// an object, when neither ovn-egress nor an operator's kubectl owns it too
// — real ovnkube's manager is the part of its user agent before the first
// "/", its host's name (its pkg/util/kube.go), so no name identifies it.
// Ownership follows writes: an Update that changes status.host moves the
// field to its writer alone; a server-side apply of the value it already
// has makes the applier a co-owner (coexist.TakeOver).
func ForeignStatusWriter(mf []metav1.ManagedFieldsEntry) (StatusWriter, bool) {
	var foreign *metav1.ManagedFieldsEntry
	for i, e := range mf {
		if e.Subresource != "status" || e.FieldsV1 == nil || !bytes.Contains(e.FieldsV1.GetRawBytes(), []byte(`"f:host"`)) {
			continue
		}
		if strings.HasPrefix(e.Manager, OwnManagerPrefix) || strings.HasPrefix(e.Manager, operatorManagerPrefix) {
			return StatusWriter{}, false
		}
		if foreign == nil {
			foreign = &mf[i]
		}
	}
	if foreign == nil {
		return StatusWriter{}, false
	}
	w := StatusWriter{Manager: foreign.Manager}
	if foreign.Time != nil {
		w.Time = foreign.Time.UTC().Format(time.RFC3339)
	}
	return w, true
}

// hold is one held EgressService: who wrote, since when it is held.
type hold struct {
	w     StatusWriter
	since time.Time
}
