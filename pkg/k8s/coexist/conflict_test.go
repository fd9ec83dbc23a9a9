package coexist

import (
	"context"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/k8s/apis/egressservice/v1"
)

func TestConflictString(t *testing.T) {
	if (Conflict{}).Active() {
		t.Fatal("the zero conflict is active")
	}
	for _, tc := range []struct {
		c    Conflict
		want []string
	}{
		{Conflict{EgressSVCPolicies: 3, ServedPods: 5}, []string{"3 ovn-kubernetes EgressSVC reroute policies", "5 addresses in its egresssvc-served-pods",
			"writes nothing", "--enable-egress-service=false", "ovn-egress migrate --apply"}},
		{Conflict{StatusWriters: []string{"a/1", "a/2", "a/3", "a/4"}}, []string{"status.host of 4 EgressService(s) written by ovnkube (a/1, a/2, a/3 and 1 more)", "--enable-egress-service=false"}},
		{Conflict{InterconnectNB: true}, []string{"transit switch", "--mode=ic"}},
	} {
		s := tc.c.String()
		if !tc.c.Active() {
			t.Errorf("%+v is not active", tc.c)
		}
		for _, w := range tc.want {
			if !strings.Contains(s, w) {
				t.Errorf("%q lacks %q", s, w)
			}
		}
		if tc.c.InterconnectNB && strings.Contains(s, "--enable-egress-service") {
			t.Errorf("an interconnect NB alone is not ovn-kubernetes' feature: %q", s)
		}
	}
}

// TestStatusWriters: only a status written last by an ovnkube manager
// counts; ovn-egress's own writes, kubectl's, and spec writes by ovnkube do
// not. The verdict follows the object, and a deletion clears it.
func TestStatusWriters(t *testing.T) {
	d := New(Config{ReroutePriority: 101}, nil, logrus.NewEntry(logrus.New()), nil)
	es := func(mf ...metav1.ManagedFieldsEntry) *egressv1.EgressService {
		return &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ManagedFields: mf}}
	}
	status := func(manager string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}
	}
	spec := metav1.ManagedFieldsEntry{Manager: "ovnkube", Operation: metav1.ManagedFieldsOperationUpdate}
	for _, tc := range []struct {
		what string
		obj  *egressv1.EgressService
		want bool
	}{
		{"ovn-egress wrote the status", es(status("ovn-egress")), false},
		{"kubectl wrote it", es(status("kubectl-patch")), false},
		{"ovnkube wrote the spec only", es(spec, status("ovn-egress")), false},
		{"ovnkube wrote the status", es(status("ovn-egress"), status("ovnkube")), true},
		{"ovn-egress wrote it back", es(status("ovn-egress")), false},
		{"ovnkube again", es(status("ovnkube")), true},
		{"the same object seen again, managedFields stripped", es(), true},
	} {
		d.ObserveEgressService(tc.obj)
		_, blocked := d.Blocked()
		if blocked != tc.want {
			t.Errorf("%s: blocked = %v, want %v", tc.what, blocked, tc.want)
		}
	}
	d.ObserveEgressService(es(status("ovnkube")))
	if c := d.Evaluate(context.Background()); !c.Active() || len(c.Services) != 1 || c.Services[0] != "ns/web" {
		t.Errorf("conflict %+v; want ns/web named", c)
	}
	d.Forget("ns/web")
	if _, blocked := d.Blocked(); blocked {
		t.Errorf("a deleted EgressService still blocks")
	}
}
