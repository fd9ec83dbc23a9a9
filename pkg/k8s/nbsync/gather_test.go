package nbsync

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
)

// A service that moved between two reads of the host index is found twice,
// as its old object (kept: the Memo knows it) and its new one: it is
// translated once, as the lister's current object, and never kept.
func TestAServiceFoundTwiceIsTranslatedAsItIsNow(t *testing.T) {
	es := func(name, host string) *egressv1.EgressService {
		o := &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		o.Status.Host = host
		return o
	}
	oldWeb, newWeb, cur := es("web", "node1"), es("web", "node2"), es("web", "node3")
	other, gone := es("db", "node1"), es("gone", "node1")
	cs := newCandidates(0, false)
	cs.put(cs.kept, "ns/web", oldWeb)
	cs.put(cs.kept, "ns/db", other)
	cs.put(cs.seen, "ns/web", newWeb)
	cs.put(cs.seen, "ns/gone", gone)
	cs.put(cs.seen, "ns/gone", gone)
	current := map[string]*egressv1.EgressService{"web": cur, "db": other}
	err := cs.settle(func(_, name string) (*egressv1.EgressService, error) {
		if o := current[name]; o != nil {
			return o, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "egressservices"}, name)
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs.kept["ns/web"] != nil || cs.seen["ns/web"] != cur {
		t.Errorf("web: kept %v, seen %v; want translated as the lister's current object", cs.kept["ns/web"], cs.seen["ns/web"])
	}
	if cs.kept["ns/db"] != other {
		t.Error("db, found once, is no longer kept")
	}
	if _, ok := cs.seen["ns/gone"]; ok {
		t.Error("a service deleted meanwhile is still translated")
	}
	// A lister error is returned, wrapped, not dropped.
	cs.put(cs.seen, "ns/db", other)
	boom := errors.New("boom")
	if err := cs.settle(func(string, string) (*egressv1.EgressService, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("settle = %v, want the lister's error", err)
	}
}
