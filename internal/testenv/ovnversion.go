package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// OVNVersionEnv names the environment variable that chooses the OVN every
// environment of this package runs: OVN23 (the default: Debian 12's
// packages, found on PATH) or OVN25 (Debian 13's OVN 25.03 and Open vSwitch
// 3.5, from the root hack/ovn-root.sh prepares once per machine).
const OVNVersionEnv = "OVN_VERSION"

// The OVN versions the environment runs.
const (
	OVN23 = "23.03"
	OVN25 = "25.03"
)

// OVNCacheEnv names the folder holding the OVN 25.03 root
// (hack/ovn-root.sh's OVN_EGRESS_CACHE; default /var/tmp/ovn-egress).
const OVNCacheEnv = "OVN_EGRESS_CACHE"

// OVNInstall is one installed OVN: where its binaries and data files are.
type OVNInstall struct {
	Version string
	// BinDir holds wrappers of the OVN and Open vSwitch binaries; empty:
	// they are looked up on PATH (Debian 12's packages).
	BinDir string
	// OVNShare and OVSShare hold the schemas (ovn-nb.ovsschema,
	// ovn-sb.ovsschema; vswitch.ovsschema).
	OVNShare, OVSShare string
	// Hint says how to install it.
	Hint string
}

// NBSchema is the path of the NB schema of this OVN.
func (i OVNInstall) NBSchema() string { return filepath.Join(i.OVNShare, "ovn-nb.ovsschema") }

// SBSchema is the path of the SB schema of this OVN.
func (i OVNInstall) SBSchema() string { return filepath.Join(i.OVNShare, "ovn-sb.ovsschema") }

// VSwitchSchema is the path of Open vSwitch's database schema.
func (i OVNInstall) VSwitchSchema() string { return filepath.Join(i.OVSShare, "vswitch.ovsschema") }

// ovnTools are the binaries that come from the chosen OVN install; every
// other tool (ip, nft, ethtool, arping, ...) is the host's.
var ovnTools = map[string]bool{
	"ovsdb-server": true, "ovsdb-tool": true, "ovsdb-client": true, "ovn-northd": true, "ovn-nbctl": true,
	"ovn-sbctl": true, "ovn-appctl": true, "ovn-trace": true, "ovs-appctl": true, "ovs-vswitchd": true,
	"ovs-vsctl": true, "ovs-ofctl": true, "ovn-controller": true,
}

var selected struct {
	once sync.Once
	inst OVNInstall
	err  error
}

// SelectedOVN returns the OVN chosen by OVN_VERSION, checked once per
// process: its ovn-nbctl must report that version.
func SelectedOVN() (OVNInstall, error) {
	selected.once.Do(func() { selected.inst, selected.err = selectOVN(os.Getenv(OVNVersionEnv)) })
	return selected.inst, selected.err
}

// OVNVersion is the chosen OVN version (OVN23 or OVN25), for tests that
// state a difference between versions. It is OVN23 when nothing is chosen.
func OVNVersion() string {
	if v := os.Getenv(OVNVersionEnv); v != "" {
		return v
	}
	return OVN23
}

func selectOVN(v string) (OVNInstall, error) {
	var inst OVNInstall
	switch v {
	case "", OVN23:
		inst = OVNInstall{Version: OVN23, OVNShare: "/usr/share/ovn", OVSShare: "/usr/share/openvswitch",
			Hint: "apt-get install -y --no-install-recommends " + OVNPackages + " " + DataplanePackages}
	case OVN25:
		cache := os.Getenv(OVNCacheEnv)
		if cache == "" {
			cache = "/var/tmp/ovn-egress"
		}
		dir := filepath.Join(cache, "ovn-"+OVN25)
		inst = OVNInstall{Version: OVN25, BinDir: filepath.Join(dir, "bin"),
			OVNShare: filepath.Join(dir, "root/usr/share/ovn"), OVSShare: filepath.Join(dir, "root/usr/share/openvswitch"),
			Hint: "hack/ovn-root.sh (Debian 13's ovn-central, ovn-host and openvswitch-switch in " + filepath.Join(dir, "root") + ")"}
		if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
			return inst, fmt.Errorf("%w: OVN %s is not prepared in %s; run %s", errMissing, v, dir, inst.Hint)
		}
	default:
		return inst, fmt.Errorf("%s=%q: want %s or %s", OVNVersionEnv, v, OVN23, OVN25)
	}
	nbctl, err := inst.lookPath("ovn-nbctl")
	if err != nil {
		return inst, fmt.Errorf("%w: ovn-nbctl not found; install with: %s", errMissing, inst.Hint)
	}
	out, err := exec.Command(nbctl, "--version").CombinedOutput()
	if err != nil {
		return inst, fmt.Errorf("%s --version: %v: %s", nbctl, err, out)
	}
	if !strings.Contains(string(out), " "+inst.Version) {
		return inst, fmt.Errorf("%s is not OVN %s: %s", nbctl, inst.Version, strings.SplitN(string(out), "\n", 2)[0])
	}
	return inst, nil
}

// lookPath finds one binary: the OVN tools in BinDir when it is set,
// everything else on PATH or in the sbin folders (a non-login root shell
// may lack them).
func (i OVNInstall) lookPath(name string) (string, error) {
	if i.BinDir != "" && ovnTools[name] {
		p := filepath.Join(i.BinDir, name)
		if _, err := os.Stat(p); err != nil {
			return "", err
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		if _, serr := os.Stat(filepath.Join(dir, name)); serr == nil {
			return filepath.Join(dir, name), nil
		}
	}
	return "", err
}

// PATH returns the PATH a shell needs to run this OVN's tools by name
// (ovn-nbctl in a printed script): BinDir first, when set.
func (i OVNInstall) PATH() string {
	if i.BinDir == "" {
		return os.Getenv("PATH")
	}
	return i.BinDir + string(os.PathListSeparator) + os.Getenv("PATH")
}
