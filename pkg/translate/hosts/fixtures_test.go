package hosts

import (
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate/translatetest"
)

// world is the shared test cluster, with host selection's own helpers
// (selectIn, lb).
type world struct{ *translatetest.World }

func newWorld(n int, fams ...ipfamily.Family) *world {
	return &world{translatetest.NewWorld(n, fams...)}
}
