package translation

import "github.com/ovn-egress/ovn-egress/pkg/translate"

// Key is what the translation controller converges: one kind of change and
// the name it concerns. Handlers only enqueue keys; a sync reads what the
// keys name from the listers and the NB cache and converges.
type Key struct {
	Kind Kind
	Name string
}

// Kind says what a Key names.
type Kind uint8

const (
	// KindEgressService: an EgressService, its Service or one of its
	// EndpointSlices changed ("namespace/name"): its contributions to the
	// rows are translated again.
	KindEgressService Kind = iota
	// KindRows: what the EgressService rows under one translate.Key read
	// changed — a node's annotations or report, its gateway router in NB —
	// or the rows themselves changed in NB (drift, or the echo of a write).
	KindRows
	// KindEgressIP: an EgressIP's rows (Name), or every EgressIP's ("").
	KindEgressIP
	// KindAll: everything, read again from scratch (start, resync, the end
	// of a standoff); owned rows nobody wants are swept.
	KindAll
)

func (k Kind) String() string {
	switch k {
	case KindEgressService:
		return "egressservice"
	case KindRows:
		return "rows"
	case KindEgressIP:
		return "egressip"
	case KindAll:
		return "all"
	}
	return "unknown"
}

func (k Key) String() string { return k.Kind.String() + ":" + k.Name }

func serviceKey(nsName string) Key { return Key{Kind: KindEgressService, Name: nsName} }
func rowsKey(k translate.Key) Key  { return Key{Kind: KindRows, Name: string(k)} }
func egressIPKey(name string) Key  { return Key{Kind: KindEgressIP, Name: name} }
func nodeRowsKey(node string) Key  { return rowsKey(translate.NodeKey(node)) }
func (k Key) rows() translate.Key  { return translate.Key(k.Name) }

// allKey converges everything.
var allKey = Key{Kind: KindAll}

// batch is one sync's keys by kind.
type batch struct {
	all       bool
	services  []string
	rows      []translate.Key
	egressIPs []string // "" for every EgressIP
}

func split(keys []Key) batch {
	var b batch
	for _, k := range keys {
		switch k.Kind {
		case KindAll:
			b.all = true
		case KindEgressService:
			b.services = append(b.services, k.Name)
		case KindRows:
			b.rows = append(b.rows, k.rows())
		case KindEgressIP:
			b.egressIPs = append(b.egressIPs, k.Name)
		}
	}
	return b
}
