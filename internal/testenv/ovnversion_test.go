package testenv

import (
	"strings"
	"testing"
)

// TestOVNVersionRuns: the OVN that OVN_VERSION chose is the one that runs —
// its daemons report that version and serve that NB schema (so a suite run
// "on 25.03" cannot quietly run the host's 23.03).
func TestOVNVersionRuns(t *testing.T) {
	want := map[string]struct{ schema, ovs string }{OVN23: {"7.0.0", "3.1."}, OVN25: {"7.11.0", "3.5."}}[OVNVersion()]
	if want.schema == "" {
		t.Fatalf("%s=%q is not a version this environment knows", OVNVersionEnv, OVNVersion())
	}
	o := NewOVN(t)
	if got, err := o.run("ovn-nbctl", "--version"); err != nil || !strings.Contains(got, "ovn-nbctl "+OVNVersion()) {
		t.Errorf("ovn-nbctl --version = %q (%v), want %s", got, err, OVNVersion())
	}
	bins, err := lookPaths(OVNPackages, "ovsdb-client", "ovs-vswitchd", "ovn-northd")
	if err != nil {
		t.Fatal(err)
	}
	o.bins["ovsdb-client"], o.bins["ovs-vswitchd"], o.bins["ovn-northd"] = bins["ovsdb-client"], bins["ovs-vswitchd"], bins["ovn-northd"]
	if got, err := o.run("ovsdb-client", "get-schema-version", o.NBAddress(), "OVN_Northbound"); err != nil || got != want.schema {
		t.Errorf("NB schema %q (%v), want %s", got, err, want.schema)
	}
	if got, err := o.run("ovs-vswitchd", "--version"); err != nil || !strings.Contains(got, "(Open vSwitch) "+want.ovs) {
		t.Errorf("ovs-vswitchd --version = %q (%v), want Open vSwitch %s*", got, err, want.ovs)
	}
	if got, err := o.run("ovn-northd", "--version"); err != nil || !strings.Contains(got, "ovn-northd "+OVNVersion()) {
		t.Errorf("ovn-northd --version = %q (%v), want %s", got, err, OVNVersion())
	}
}
