package node

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNetworkNotFound: a network name is neither a VRF device nor a routing
// table name on this node.
var ErrNetworkNotFound = errors.New("network not found")

// TableResolver turns a network name into a routing table id: the table of
// the VRF device of that name, else the id iproute2 gives the name in
// rt_tables (and rt_tables.d/*.conf next to it). Numbers never get here:
// translate.NetworkTable reads them.
type TableResolver struct {
	nl       Netlink
	rtTables string
}

// NewTableResolver resolves through nl and the rt_tables file at rtTables
// (usually /etc/iproute2/rt_tables).
func NewTableResolver(nl Netlink, rtTables string) *TableResolver {
	return &TableResolver{nl: nl, rtTables: rtTables}
}

// Resolution says where a network name was found.
type Resolution struct {
	Table uint32
	// Source is "vrf" or the file that named the table.
	Source string
}

// Resolve returns the table of name, or an error wrapping
// ErrNetworkNotFound. Other errors (netlink, an unreadable file) are
// transient and worth a retry.
//
// The name is a tenant's input (EgressService spec.network): one the
// kernel could never give a link (too long, a '/', white space; or one it
// refuses outright, ERANGE or EINVAL) is no VRF, so it is looked up in
// rt_tables only and at worst not found. Only that service pays for it,
// never the node's sync.
func (r *TableResolver) Resolve(name string) (Resolution, error) {
	if CanBeLinkName(name) {
		link, err := r.nl.LinkByName(name)
		var notFound netlink.LinkNotFoundError
		switch {
		case err == nil:
			if vrf, ok := link.(*netlink.Vrf); ok && vrf.Table != 0 {
				return Resolution{Table: vrf.Table, Source: "vrf"}, nil
			}
			// A link of another type with that name is not a network.
		case errors.As(err, &notFound) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ERANGE) || errors.Is(err, unix.EINVAL):
		default:
			return Resolution{}, fmt.Errorf("look up link %q: %w", name, err)
		}
	}
	files, err := r.tableFiles()
	if err != nil {
		return Resolution{}, err
	}
	for _, f := range files {
		id, ok, err := lookupRTTables(f, name)
		if err != nil {
			return Resolution{}, err
		}
		if ok {
			return Resolution{Table: id, Source: f}, nil
		}
	}
	return Resolution{}, fmt.Errorf("%w: %q is not a VRF device and not in %s", ErrNetworkNotFound, name, r.rtTables)
}

// CanBeLinkName reports whether the kernel could have a link called name
// (dev_valid_name: 1 to IFNAMSIZ-1 bytes, not "." or "..", no '/', ':'
// or white space).
func CanBeLinkName(name string) bool {
	if name == "" || len(name) >= unix.IFNAMSIZ || name == "." || name == ".." {
		return false
	}
	return !strings.ContainsAny(name, "/: \t\n\v\f\r")
}

// ResolveAll resolves names; the ones not found are left out, the first
// transient error is returned with what was resolved.
func (r *TableResolver) ResolveAll(names []string) (map[string]uint32, error) {
	out := make(map[string]uint32, len(names))
	for _, n := range names {
		res, err := r.Resolve(n)
		if errors.Is(err, ErrNetworkNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		out[n] = res.Table
	}
	return out, nil
}

// tableFiles lists rt_tables then rt_tables.d/*.conf (sorted), as iproute2
// reads them; missing files are skipped.
func (r *TableResolver) tableFiles() ([]string, error) {
	files := []string{r.rtTables}
	matches, err := filepath.Glob(filepath.Join(r.rtTables+".d", "*.conf"))
	if err != nil {
		return nil, fmt.Errorf("list %s.d: %w", r.rtTables, err)
	}
	sort.Strings(matches)
	return append(files, matches...), nil
}

// lookupRTTables finds name in an rt_tables file: lines "<id> <name>",
// '#' starts a comment; the id is decimal or 0x hex.
func lookupRTTables(path, name string) (uint32, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[1] != name {
			continue
		}
		id, err := strconv.ParseUint(fields[0], 0, 32)
		if err != nil || id == 0 {
			continue
		}
		return uint32(id), true, nil
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	return 0, false, nil
}
