package egressservice

import (
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
	"github.com/ovn-egress/ovn-egress/pkg/translate/translatetest"
)

// world is the shared test cluster, with the rows' own helpers (index,
// drain); icWorld is its interconnect variant.
type world struct{ *translatetest.World }

func newWorld(n int, fams ...ipfamily.Family) *world {
	return &world{translatetest.NewWorld(n, fams...)}
}

func icWorld(n int, fams ...ipfamily.Family) *world {
	return &world{translatetest.ICWorld(n, fams...)}
}
