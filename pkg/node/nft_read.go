package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/ovn-egress/ovn-egress/pkg/translate/nodeplan"
	"net/netip"
	"os/exec"

	"sigs.k8s.io/knftables"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// TableReader reads the agent's whole table with one run of the nft binary
// (`nft --json list table inet ovn-egress`). knftables reads one object per
// run: the two SNAT maps and three chains took five runs, 88–180 ms of a
// sync in the local e2e (a run costs 15 ms on an idle machine and far more
// while a failover keeps every process busy), most of the time from a new
// host's status.host to its SNAT. Writes still go through knftables.
type TableReader struct {
	// Path is the nft binary ("nft": looked up in PATH).
	Path string
}

// read returns what the agent's table holds; a missing table reads as
// empty. It runs in the calling thread's network namespace.
func (r TableReader) read(ctx context.Context) (nftState, error) {
	path := r.Path
	if path == "" {
		path = "nft"
	}
	cmd := exec.CommandContext(ctx, path, "--json", "list", "table", string(knftables.InetFamily), TableName)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if bytes.Contains(stderr.Bytes(), []byte("No such file or directory")) {
			return nftState{elements: map[netip.Addr]nodeplan.SNATElement{}, chains: map[string][]string{}}, nil
		}
		return nftState{}, fmt.Errorf("nft list table %s: %w: %s", TableName, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return parseTable(stdout.Bytes())
}

// parseTable reads nft's JSON listing of the agent's table: the elements of
// the SNAT maps, and the rule comments of every chain, in order (a chain
// without rules is there, empty). Objects the agent does not read (sets,
// counters) are skipped.
func parseTable(out []byte) (nftState, error) {
	st := nftState{elements: map[netip.Addr]nodeplan.SNATElement{}, chains: map[string][]string{}}
	var doc struct {
		Objects []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return st, fmt.Errorf("parse nft's listing: %w", err)
	}
	maps := map[string]ipfamily.Family{}
	for _, f := range ipfamily.All {
		maps[snatMap(f)] = f
	}
	for _, o := range doc.Objects {
		switch {
		case o["map"] != nil:
			var m struct {
				Name string            `json:"name"`
				Elem []json.RawMessage `json:"elem"`
			}
			if err := json.Unmarshal(o["map"], &m); err != nil {
				return st, fmt.Errorf("parse nft map: %w", err)
			}
			f, ok := maps[m.Name]
			if !ok {
				continue
			}
			for _, raw := range m.Elem {
				e, err := parseMapElement(raw)
				if err != nil {
					return st, fmt.Errorf("map %s: %w", m.Name, err)
				}
				if se, ok := elementFromNFT(f, e); ok {
					st.elements[se.Endpoint] = se
				}
			}
		case o["chain"] != nil:
			var c struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(o["chain"], &c); err != nil {
				return st, fmt.Errorf("parse nft chain: %w", err)
			}
			if st.chains[c.Name] == nil {
				st.chains[c.Name] = []string{}
			}
		case o["rule"] != nil:
			var r struct {
				Chain   string `json:"chain"`
				Comment string `json:"comment"`
			}
			if err := json.Unmarshal(o["rule"], &r); err != nil {
				return st, fmt.Errorf("parse nft rule: %w", err)
			}
			st.chains[r.Chain] = append(st.chains[r.Chain], r.Comment)
		}
	}
	return st, nil
}

// parseMapElement reads one [key, value] of a map whose key and value are
// single addresses; a key with a comment (the service, for the agent's
// elements) or a timeout is {"elem": {"val": …, "comment": …}}.
func parseMapElement(raw json.RawMessage) (*knftables.Element, error) {
	var kv []json.RawMessage
	if err := json.Unmarshal(raw, &kv); err != nil || len(kv) != 2 {
		return nil, fmt.Errorf("element %s is not [key, value]", raw)
	}
	e := &knftables.Element{Key: make([]string, 1), Value: make([]string, 1)}
	if err := json.Unmarshal(kv[0], &e.Key[0]); err != nil {
		var compound struct {
			Elem struct {
				Val     string  `json:"val"`
				Comment *string `json:"comment"`
			} `json:"elem"`
		}
		if err := json.Unmarshal(kv[0], &compound); err != nil || compound.Elem.Val == "" {
			return nil, fmt.Errorf("element key %s is not an address", kv[0])
		}
		e.Key[0], e.Comment = compound.Elem.Val, compound.Elem.Comment
	}
	if err := json.Unmarshal(kv[1], &e.Value[0]); err != nil {
		return nil, fmt.Errorf("element value %s is not an address", kv[1])
	}
	return e, nil
}
