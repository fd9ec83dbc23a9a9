package coexist

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
)

func TestConflictString(t *testing.T) {
	if (Conflict{}).Active() || (Conflict{}).EgressIPActive() {
		t.Fatal("the zero conflict is active")
	}
	for _, tc := range []struct {
		c    Conflict
		want []string
	}{
		{Conflict{EgressSVCPolicies: 3, ServedPods: 5}, []string{"3 ovn-kubernetes EgressSVC reroute policies", "5 addresses in its egresssvc-served-pods",
			"writes nothing", "--enable-egress-service=false", "ovn-egress migrate --apply"}},
		{Conflict{Zones: []string{"a", "b", "c", "d"}}, []string{"the NB of 4 zone(s) (a, b, c and 1 more)", "--enable-egress-service=false"}},
		{Conflict{InterconnectNB: true}, []string{"transit switch", "--mode=ic"}},
		{Conflict{ForeignInstance: "team-b/ovn-egress"}, []string{`another ovn-egress install, "team-b/ovn-egress"`,
			"ovn-nbctl remove NB_Global . external_ids ovn-egress.io/instance"}},
		{Conflict{Unclaimed: "connection refused"}, []string{"no claim of this NB for this install yet (connection refused)", "tried again every second"}},
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
	eip := Conflict{EgressIPRows: 2}
	if eip.Active() || !eip.EgressIPActive() || !strings.Contains(eip.EgressIPString(), "--enable-egress-ip=false") {
		t.Errorf("EgressIP rows: active %v, EgressIP active %v, %q", eip.Active(), eip.EgressIPActive(), eip.EgressIPString())
	}
	if held := (Conflict{Held: []string{"ns/web"}}); held.Active() || held.EgressIPActive() {
		t.Error("a held service stands everything back")
	}
}

// clock is a settable time for the Detector.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func statusEntry(manager string, fields string, at time.Time) metav1.ManagedFieldsEntry {
	t := metav1.NewTime(at)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
		Time: &t, FieldsV1: metav1.NewFieldsV1(fields)}
}

const hostFields = `{"f:status":{".":{},"f:host":{}}}`

// TestHolds: a status.host owned by a field manager that is neither
// ovn-egress's nor kubectl's — whatever its name: real ovnkube's is its
// host's name — holds that one service for Config.Hold; nothing stands
// back. The same writer's next write holds it again; ovn-egress's own
// write, an operator's, or the object's deletion ends a hold; a hold ends
// by itself when its time is up.
func TestHolds(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	d := New(Config{ReroutePriority: 101, HoldWriters: true, Hold: time.Minute}, nil, logrus.NewEntry(logrus.New()), nil)
	d.now = clk.now
	es := func(mf ...metav1.ManagedFieldsEntry) *egressv1.EgressService {
		return &egressv1.EgressService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ManagedFields: mf}}
	}
	t0 := clk.now()
	for _, tc := range []struct {
		what string
		obj  *egressv1.EgressService
		want bool
	}{
		{"ovn-egress wrote the status", es(statusEntry("ovn-egress-selection", hostFields, t0)), false},
		{"kubectl wrote it", es(statusEntry("kubectl-patch", hostFields, t0)), false},
		{"ovnkube's host wrote another status field only", es(statusEntry("control-plane-1", `{"f:status":{"f:conditions":{}}}`, t0)), false},
		{"ovnkube's host (manager control-plane-1) wrote status.host", es(statusEntry("control-plane-1", hostFields, t0)), true},
		{"ovn-egress applied the same value: a co-owner (migrate's take-over)", es(statusEntry("control-plane-1", hostFields, t0),
			statusEntry("ovn-egress-migrate", hostFields, t0)), false},
		{"ovnkube wrote another value: its own again", es(statusEntry("control-plane-1", hostFields, t0.Add(time.Second))), true},
		{"ovn-egress wrote it back", es(statusEntry("ovn-egress-selection", hostFields, t0)), false},
		{"a manager named ovnkube", es(statusEntry("ovnkube", hostFields, t0)), true},
		{"the same object seen again, managedFields stripped", es(), true},
	} {
		d.ObserveEgressService(tc.obj)
		if got := d.Held("ns/web"); got != tc.want {
			t.Errorf("%s: held = %v, want %v", tc.what, got, tc.want)
		}
		if _, blocked := d.Blocked(); blocked {
			t.Errorf("%s: a status writer stands everything back", tc.what)
		}
	}
	if c := d.Evaluate(context.Background()); len(c.Held) != 1 || c.Held[0] != "ns/web" || c.Active() {
		t.Errorf("conflict %+v; want ns/web held and nothing active", c)
	}
	clk.add(time.Minute)
	if d.Held("ns/web") || len(d.HeldKeys()) != 0 {
		t.Error("the hold outlived its time")
	}
	if c := d.Evaluate(context.Background()); len(c.Held) != 0 {
		t.Errorf("conflict %+v after the hold; want none held", c)
	}
	// The same writer writes again: held again.
	d.ObserveEgressService(es(statusEntry("ovnkube", hostFields, clk.now())))
	if !d.Held("ns/web") {
		t.Error("a new write of the same writer does not hold")
	}
	d.Forget("ns/web")
	if d.Held("ns/web") {
		t.Errorf("a deleted EgressService is still held")
	}
	// A Detector that does not hold (a zone) never does.
	z := New(Config{ReroutePriority: 101}, nil, logrus.NewEntry(logrus.New()), nil)
	z.ObserveEgressService(es(statusEntry("ovnkube", hostFields, t0)))
	if z.Held("ns/web") {
		t.Error("a zone's Detector holds")
	}
}

// TestZoneVerdictsDebounced: an interconnect master stands back while a
// zone's report says its NB holds ovn-kubernetes' egress-service rows, and
// stands back from EgressIP alone while one says its EgressIP serves pods;
// a verdict that goes away reads as gone only after ClearAfter (its rows
// blink while ovn-kubernetes moves a host), and coming back meanwhile keeps
// the standoff without a gap.
func TestZoneVerdictsDebounced(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	d := New(Config{ClearAfter: 5 * time.Second}, nil, logrus.NewEntry(logrus.New()), nil)
	d.now = clk.now
	d.reports = corelisters.NewConfigMapLister(idx)
	report := func(node string, v ZoneVerdict) {
		name, _ := translate.ReportConfigMapName(node)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ovn-egress", Name: name},
			Data: map[string]string{translate.ReportNodeKey: node, translate.ReportDataKey: "{}"}}
		if s := v.Encode(); s != "" {
			cm.Data[ReportVerdictKey] = s
		}
		if err := idx.Update(cm); err != nil {
			t.Fatal(err)
		}
	}
	report("node1", ZoneVerdict{})
	report("node2", ZoneVerdict{EgressService: "found 1 ovn-kubernetes EgressSVC reroute policies"})
	c := d.Evaluate(context.Background())
	if !c.Active() || len(c.Zones) != 1 || c.Zones[0] != "node2" || c.EgressIPActive() {
		t.Fatalf("conflict %+v; want node2's egress-service rows only", c)
	}
	// A forged part (not the node's first report part) is not read.
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ovn-egress", Name: "ovn-egress-report-1.node1"},
		Data: map[string]string{translate.ReportNodeKey: "node1", ReportVerdictKey: `{"egressIP":"x"}`}}
	if err := idx.Add(forged); err != nil {
		t.Fatal(err)
	}
	// The rows blink: gone for 2 s, back, gone again.
	report("node2", ZoneVerdict{})
	clk.add(2 * time.Second)
	if c := d.Evaluate(context.Background()); !c.Active() {
		t.Error("a verdict gone for 2 s already reads as gone")
	}
	report("node2", ZoneVerdict{EgressService: "back"})
	clk.add(time.Second)
	d.Evaluate(context.Background())
	report("node2", ZoneVerdict{})
	clk.add(4 * time.Second)
	if c := d.Evaluate(context.Background()); !c.Active() {
		t.Error("the quiet period did not restart when the rows came back")
	}
	clk.add(2 * time.Second)
	if c := d.Evaluate(context.Background()); c.Active() {
		t.Errorf("still standing back 6 s after the rows went: %+v", c)
	}
	report("node1", ZoneVerdict{EgressIP: "found 2 rows of ovn-kubernetes' own EgressIP"})
	if c := d.Evaluate(context.Background()); c.Active() || !c.EgressIPActive() || len(c.EgressIPZones) != 1 || c.EgressIPZones[0] != "node1" {
		t.Errorf("conflict %+v; want node1's EgressIP only", c)
	}
	if cms, _ := d.reports.List(labels.Everything()); len(cms) != 3 {
		t.Fatalf("%d report ConfigMaps", len(cms))
	}
}

// TestRelayCarriesOnlyAnotherInstall: the node agent beside a zone hears of
// another install's claim on the zone's NB, once per change; a claim that
// failed (the NB down) names nobody, so neither the agent nor the zone's
// published verdict hears of it, while the zone itself writes nothing.
func TestRelayCarriesOnlyAnotherInstall(t *testing.T) {
	r := &Relay{}
	calls := 0
	r.Subscribe(func() { calls++ })
	for _, step := range []struct {
		c       Conflict
		foreign string
		calls   int
	}{
		{Conflict{Unclaimed: "connection refused"}, "", 0},
		{Conflict{ForeignInstance: "team-b/ovn-egress"}, "team-b/ovn-egress", 1},
		{Conflict{ForeignInstance: "team-b/ovn-egress", Waiting: true}, "team-b/ovn-egress", 1},
		{Conflict{}, "", 2},
	} {
		r.Set(step.c)
		if got := r.ForeignInstance(); got != step.foreign || calls != step.calls {
			t.Errorf("after %+v: foreign %q, %d calls; want %q, %d", step.c, got, calls, step.foreign, step.calls)
		}
	}
	c := Conflict{Unclaimed: "connection refused"}
	if !c.Active() || !c.EgressIPActive() {
		t.Error("a failed claim lets the controllers write")
	}
	if v := VerdictOf(c); v != (ZoneVerdict{}) {
		t.Errorf("a failed claim is published as the zone's verdict: %+v", v)
	}
	if v := VerdictOf(Conflict{ForeignInstance: "team-b/ovn-egress"}); v.EgressService == "" || v.EgressIP == "" {
		t.Errorf("another install's claim is not published: %+v", v)
	}
}
