package ovn

// The external_ids keys every row ovn-egress writes carries (DESIGN §3).
const (
	KeyOwnerController = "k8s.ovn.org/owner-controller"
	KeyOwnerType       = "k8s.ovn.org/owner-type"
	KeyName            = "k8s.ovn.org/name"
	KeyFamily          = "ip-family"
	KeyID              = "k8s.ovn.org/id"
)
