package ovn_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"github.com/ovn-egress/ovn-egress/pkg/ovn"
)

// TestClaimInstance: installs that claim one NB at once (each with its own
// client) all learn the same owner, one of them; a claim stays with its
// owner; a release by another install changes nothing, the owner's frees
// the NB for the next claim. On an NB whose NB_Global row nobody has
// created yet (no northd), the claim creates it.
func TestClaimInstance(t *testing.T) {
	for _, northd := range []bool{true, false} {
		o := testenv.NewOVN(t, testenv.OVNOptions{NoNorthd: !northd})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		instances := []string{"ns-a/ovn-egress", "ns-b/ovn-egress", "ns-c/other", "ns-d/ovn-egress"}
		clients := make([]client.Client, len(instances))
		for i := range instances {
			c, err := ovn.NewNBClient(ctx, ovn.ClientConfig{Addresses: []string{o.NBAddress()}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			clients[i] = c
		}
		owners := make([]string, len(instances))
		errs := make([]error, len(instances))
		var wg sync.WaitGroup
		for i := range instances {
			wg.Go(func() {
				// Without a NB_Global row, all but one insert fail: the
				// caller tries again, as the Detector does on its next round.
				for range 20 {
					if owners[i], errs[i] = ovn.ClaimInstance(ctx, clients[i], instances[i]); errs[i] == nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		for i := range instances {
			if errs[i] != nil {
				t.Fatalf("northd %v: claim of %s: %v", northd, instances[i], errs[i])
			}
			if owners[i] != owners[0] || !strings.HasPrefix(owners[i], "ns-") {
				t.Fatalf("northd %v: owners %q: want one owner for all", northd, owners)
			}
		}
		if got, err := o.NBCtl("get", "NB_Global", ".", "external_ids:"+`"`+ovn.InstanceKey+`"`); err != nil || strings.Trim(strings.TrimSpace(got), `"`) != owners[0] {
			t.Fatalf("northd %v: NB_Global holds %q (%v); want %q", northd, got, err, owners[0])
		}
		if rows, _ := o.NBCtl("--bare", "--columns=_uuid", "list", "NB_Global"); len(strings.Fields(rows)) != 1 {
			t.Fatalf("northd %v: NB_Global rows %q; want one", northd, rows)
		}
		winner := -1
		for i := range instances {
			if instances[i] == owners[0] {
				winner = i
			} else if err := ovn.ReleaseInstance(ctx, clients[i], instances[i]); err != nil {
				t.Fatal(err)
			}
		}
		waitOwner := func(c client.Client, want string) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); ovn.InstanceOwner(c) != want; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("northd %v: owner %q; want %q", northd, ovn.InstanceOwner(c), want)
				}
			}
		}
		other := (winner + 1) % len(instances)
		waitOwner(clients[other], owners[0])
		if err := ovn.ReleaseInstance(ctx, clients[winner], instances[winner]); err != nil {
			t.Fatal(err)
		}
		waitOwner(clients[other], "")
		if got, err := ovn.ClaimInstance(ctx, clients[other], instances[other]); err != nil || got != instances[other] {
			t.Fatalf("northd %v: claim after the release: %q, %v; want %q", northd, got, err, instances[other])
		}
	}
}
