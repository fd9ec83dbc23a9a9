package ovn_test

import (
	"slices"
	"testing"

	"github.com/ovn-egress/ovn-egress/pkg/ovn"
)

// TestPlaintextEndpoints: the tcp: NB endpoints the master and zones warn
// about at start are those off loopback; unix: and ssl: never.
func TestPlaintextEndpoints(t *testing.T) {
	cfg := ovn.ClientConfig{Addresses: []string{"tcp:127.0.0.1:6641,tcp:[::1]:6641", "tcp:172.18.0.2:6641", "tcp:[fc00::2]:6641",
		"tcp:ovnkube-db:6641", "ssl:172.18.0.3:6641", "unix:/var/run/ovn/ovnnb_db.sock"}}
	want := []string{"tcp:172.18.0.2:6641", "tcp:[fc00::2]:6641", "tcp:ovnkube-db:6641"}
	if got := cfg.Plaintext(); !slices.Equal(got, want) {
		t.Errorf("plaintext endpoints %v, want %v", got, want)
	}
}
