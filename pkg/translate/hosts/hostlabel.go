package hosts

import (
	"github.com/ovn-egress/ovn-egress/pkg/translate"
	"slices"
	"time"
)

// ReasonNodeLabelCollision: another EgressService, created earlier, has the
// same host label (NodeLabel of "team-a"/"web" and of "team"/"a-web" is
// one label): this one is not hosted, so that the announcer never follows
// one service's label to the other's host.
const ReasonNodeLabelCollision translate.Reason = "NodeLabelCollision"

// LabelClaim is one LoadBalancerIP EgressService whose host label is the
// label claimed.
type LabelClaim struct {
	Key     string // "namespace/name"
	Created time.Time
}

// labelHolder is the claim that keeps the label: the earliest created,
// then the first by key. A later service never takes the label (and so the
// host) away from one that had it.
func labelHolder(claims []LabelClaim) string {
	if len(claims) == 0 {
		return ""
	}
	return slices.MinFunc(claims, func(a, b LabelClaim) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	}).Key
}
