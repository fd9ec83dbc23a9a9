package ovn

import (
	"slices"
	"testing"
)

func TestSBAddresses(t *testing.T) {
	for _, tc := range []struct {
		nb, want []string
		err      bool
	}{
		{nb: []string{"unix:/var/run/ovn/ovnnb_db.sock"}, want: []string{"unix:/var/run/ovn/ovnsb_db.sock"}},
		{nb: []string{"unix:nb.sock"}, want: []string{"unix:sb.sock"}},
		// only the file name changes, never a directory that says nb
		{nb: []string{"unix:/run/nb/ovnnb_db.sock"}, want: []string{"unix:/run/nb/ovnsb_db.sock"}},
		{nb: []string{"tcp:10.0.0.1:6641", "ssl:[fd00::1]:6641"}, want: []string{"tcp:10.0.0.1:6642", "ssl:[fd00::1]:6642"}},
		{nb: []string{"tcp:10.0.0.1:7641"}, err: true},
		{nb: []string{"unix:/run/ovn/db.sock"}, err: true},
	} {
		got, err := SBAddresses(tc.nb)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("SBAddresses(%v) = %v, %v; want %v (error: %v)", tc.nb, got, err, tc.want, tc.err)
		}
	}
}
