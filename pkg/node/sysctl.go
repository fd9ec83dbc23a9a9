package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// Sysctl reads and writes kernel parameters by their /proc/sys path
// ("net/ipv4/ip_forward").
type Sysctl interface {
	Get(name string) (string, error)
	Set(name, value string) error
}

// ProcSysctl is Sysctl over a /proc/sys tree. Network parameters belong to
// the network namespace of the thread that opens the file, so with a named
// namespace the calls run inside Namespace.Do.
type ProcSysctl struct{ Root string }

// NewProcSysctl uses /proc/sys.
func NewProcSysctl() ProcSysctl { return ProcSysctl{Root: "/proc/sys"} }

func (p ProcSysctl) Get(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(p.Root, name))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", name, err) // fs.ErrNotExist for a missing interface
	}
	return strings.TrimSpace(string(b)), nil
}

func (p ProcSysctl) Set(name, value string) error {
	if err := os.WriteFile(filepath.Join(p.Root, name), []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("write sysctl %s: %w", name, err)
	}
	return nil
}

// forwardingSysctl is the family's forwarding switch. The host path needs
// it: rerouted pod traffic arrives on the management port and is forwarded
// out of the node (with 0 it dies as IpInAddrErrors, reference/hostpath.md).
func forwardingSysctl(f ipfamily.Family) string {
	if f == ipfamily.V6 {
		return "net/ipv6/conf/all/forwarding"
	}
	return "net/ipv4/ip_forward"
}
