package testenv

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

// DataplanePackages are the Debian packages the packet-forwarding
// environment needs on top of OVNPackages.
const DataplanePackages = "openvswitch-switch ovn-host iproute2 ethtool iputils-arping"

// DataplaneChassis is the system-id of the one chassis every GR is bound to.
const DataplaneChassis = "oe-chassis"

// Dataplane is an ovn-kubernetes-like cluster that forwards real packets on
// one machine (reference/dataplane.md, reference/hostpath.md):
//
//   - ovs-vswitchd with the userspace (netdev) datapath runs in namespace OVS,
//     with ovn-controller as the single chassis all GRs are bound to;
//   - every node has a host namespace (Hosts[node]) with its management
//     port ovn-k8s-mp0 (a veth into br-int, LSP k8s-<node>) and an eth0 on
//     the external network, forwarding on: the host path SNATs there;
//   - the external network is a Linux bridge in namespace Bridge joining the
//     hosts' eth0, br-ex's uplink (the GRs' localnet ports) and Ext, the
//     outside world (172.18.0.1, fc00:f853:ccd:e793::1), which is also every
//     host's and GR's default gateway;
//   - pods are namespaces with an eth0 veth into br-int (AddPod).
//
// TX checksum offload is off on every veth (conntrack would otherwise see
// partial checksums as invalid and skip NAT). Everything is removed when the
// test ends: processes by pid, namespaces by name.
type Dataplane struct {
	OVN    *OVN
	Topo   Topology
	OVS    *NetNS
	Bridge *NetNS
	Ext    *NetNS
	Hosts  map[string]*NetNS

	dir  string
	bins map[string]string
	env  []string
	pods int
	// daemons are ovs-vswitchd and ovn-controller (Died watches them).
	daemons []*daemon
}

// Died returns an error naming the dataplane daemon that exited, with the
// end of its log (ovs-vswitchd's own, where OVS writes its assertion), or
// nil while both run.
func (d *Dataplane) Died() error {
	for _, dm := range d.daemons {
		if err := dm.exited(); err != nil {
			return fmt.Errorf("%w\n%s's log ends:\n%s", err, dm.name, tail(filepath.Join(d.dir, dm.name+".log"), 5))
		}
	}
	return nil
}

// NewDataplane starts OVS and ovn-controller, builds the namespaces and
// wires them, writes the topology into NB (binding every GR to the one
// chassis) and waits until ovn-controller has programmed it.
func NewDataplane(t testing.TB, o *OVN, topo Topology) *Dataplane {
	t.Helper()
	bins, err := lookPaths(DataplanePackages, "ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovn-controller", "ip", "arping")
	if err != nil {
		t.Fatalf("dataplane: %v", err)
	}
	inst, _ := SelectedOVN() // lookPaths failed if it did
	topo.Chassis = DataplaneChassis
	dir := shortTempDir(t)
	d := &Dataplane{OVN: o, Topo: topo, Hosts: map[string]*NetNS{}, dir: dir, bins: bins,
		env: []string{"OVS_RUNDIR=" + dir, "OVS_LOGDIR=" + dir, "OVS_DBDIR=" + dir, "OVN_RUNDIR=" + dir}}
	if out, err := exec.Command(bins["ovsdb-tool"], "create", filepath.Join(dir, "conf.db"), inst.VSwitchSchema()).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create conf.db: %v: %s", err, out)
	}
	db, err := startDaemon(dir, "ovsdb-server", d.env, bins["ovsdb-server"], filepath.Join(dir, "conf.db"), "--no-chdir", "-vconsole:off",
		"--pidfile="+filepath.Join(dir, "ovsdb-server.pid"), "--log-file="+filepath.Join(dir, "ovsdb-server.log"),
		"--unixctl="+filepath.Join(dir, "ovsdb-server.ctl"), "--remote=punix:"+d.vswitchSock())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.stop(5 * time.Second) })
	if err := waitFor(10*time.Second, "conf.db socket", func() error { _, err := os.Stat(d.vswitchSock()); return err }, db); err != nil {
		t.Fatal(err)
	}
	d.Vsctl(t, "--no-wait", "init")

	d.OVS = NewNetNS(t, "oe-ovs")
	d.Bridge = NewNetNS(t, "oe-br")
	d.Ext = NewNetNS(t, "oe-ext")
	vswitchd, err := startDaemon(dir, "ovs-vswitchd", d.env, bins["ip"], "netns", "exec", d.OVS.Name, bins["ovs-vswitchd"],
		"unix:"+d.vswitchSock(), "--no-chdir", "-vconsole:off", "--pidfile="+filepath.Join(dir, "ovs-vswitchd.pid"),
		"--log-file="+filepath.Join(dir, "ovs-vswitchd.log"), "--unixctl="+filepath.Join(dir, "ovs-vswitchd.ctl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vswitchd.stop(5 * time.Second) })
	d.Vsctl(t, "set", "Open_vSwitch", ".", "external_ids:system-id="+DataplaneChassis, "external_ids:ovn-remote="+o.SBAddress(),
		"external_ids:ovn-encap-type=geneve", "external_ids:ovn-encap-ip=127.0.0.1",
		"external_ids:ovn-bridge-datapath-type=netdev", "external_ids:ovn-bridge-mappings=physnet:br-ex")
	d.Vsctl(t, "add-br", "br-ex", "--", "set", "Bridge", "br-ex", "datapath_type=netdev")
	controller, err := startDaemon(dir, "ovn-controller", d.env, bins["ovn-controller"], "unix:"+d.vswitchSock(),
		"--no-chdir", "-vconsole:off", "--pidfile="+filepath.Join(dir, "ovn-controller.pid"), "--log-file="+filepath.Join(dir, "ovn-controller.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { controller.stop(5 * time.Second) })
	d.daemons = []*daemon{vswitchd, controller}
	if err := waitFor(20*time.Second, "br-int", func() error {
		_, err := d.vsctl("br-exists", "br-int")
		return err
	}, vswitchd, controller); err != nil {
		t.Fatal(err)
	}

	d.wireExternal(t)
	for i, n := range topo.Nodes {
		d.wireHost(t, i+1, n)
	}
	o.BuildTopology(t, topo)
	d.WaitHV(t)
	return d
}

func (d *Dataplane) vswitchSock() string { return filepath.Join(d.dir, "db.sock") }

// Dir is the directory holding the OVS database, sockets and logs.
func (d *Dataplane) Dir() string { return d.dir }

func (d *Dataplane) vsctl(args ...string) (string, error) {
	cmd := exec.Command(d.bins["ovs-vsctl"], append([]string{"--db=unix:" + d.vswitchSock(), "--timeout=20"}, args...)...)
	cmd.Env = append(os.Environ(), d.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ovs-vsctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Vsctl runs ovs-vsctl against the dataplane's OVS database.
func (d *Dataplane) Vsctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := d.vsctl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WaitHV waits until ovn-controller has caught up with NB.
func (d *Dataplane) WaitHV(t testing.TB) {
	t.Helper()
	if _, err := d.OVN.nbctl(30*time.Second, "--wait=hv", "sync"); err != nil {
		t.Fatalf("wait for ovn-controller: %v", err)
	}
}

// ExtIPs are the outside world's addresses, one per family.
func (d *Dataplane) ExtIPs() []netip.Addr { return d.Topo.ExternalGateways }

func prefixLen(f ipfamily.Family) string {
	if f == ipfamily.V6 {
		return "/64"
	}
	return "/16"
}

// wireExternal builds the external L2: bridge br0, the outside world's
// eth0 and br-ex's uplink.
func (d *Dataplane) wireExternal(t testing.TB) {
	t.Helper()
	d.Bridge.MustRun(t, "ip", "link", "add", "br0", "type", "bridge")
	d.Bridge.MustRun(t, "ip", "link", "set", "br0", "up")
	Veth(t, d.Ext, "eth0", d.Bridge, "ext-b")
	d.Bridge.MustRun(t, "ip", "link", "set", "ext-b", "master", "br0")
	for i, gw := range d.Topo.ExternalGateways {
		d.Ext.Addr(t, "eth0", gw.String()+prefixLen(d.Topo.Families[i]))
	}
	Veth(t, d.OVS, "brex-o", d.Bridge, "brex-b")
	d.Bridge.MustRun(t, "ip", "link", "set", "brex-b", "master", "br0")
	d.Vsctl(t, "add-port", "br-ex", "brex-o")
}

// wireHost builds node n's host namespace: eth0 on the external network
// and the management port into br-int.
func (d *Dataplane) wireHost(t testing.TB, i int, n TopologyNode) {
	t.Helper()
	h := NewNetNS(t, "oe-"+n.Name)
	d.Hosts[n.Name] = h
	Veth(t, h, "eth0", d.Bridge, fmt.Sprintf("h%d-b", i))
	d.Bridge.MustRun(t, "ip", "link", "set", fmt.Sprintf("h%d-b", i), "master", "br0")
	for _, p := range n.HostIPs {
		h.Addr(t, "eth0", p.String())
	}
	ovsEnd := fmt.Sprintf("mp%d-o", i)
	Veth(t, d.OVS, ovsEnd, h, "ovn-k8s-mp0")
	h.MustRun(t, "ip", "link", "set", "ovn-k8s-mp0", "address", MAC(n.MgmtIPs()[0]))
	for j, s := range n.Subnets {
		f := ipfamily.OfPrefix(s)
		h.Addr(t, "ovn-k8s-mp0", netip.PrefixFrom(ipfamily.Nth(s, 2), s.Bits()).String())
		h.MustRun(t, "ip", routeFlag(f), "route", "add", d.Topo.ClusterSubnets[j].String(), "via", ipfamily.Nth(s, 1).String(), "dev", "ovn-k8s-mp0")
		h.MustRun(t, "ip", routeFlag(f), "route", "add", "default", "via", d.Topo.ExternalGateways[j].String(), "dev", "eth0")
	}
	h.Sysctl(t, "net/ipv4/ip_forward", "1")
	h.Sysctl(t, "net/ipv6/conf/all/forwarding", "1")
	if n.GatewayMode == "local" {
		// ovn-kubernetes' local gateway masquerade (its chain
		// ovn-kube-local-gw-masq, postrouting priority srcnat+1, jumping to
		// ovn-kube-pod-subnet-masq): this node's pods leave with its address.
		var rules []string
		for _, s := range n.Subnets {
			rules = append(rules, fmt.Sprintf("  %s saddr %s masquerade\n", nftFamilyMatch(ipfamily.OfPrefix(s)), s))
		}
		h.MustRun(t, "sh", "-c", "printf 'table inet ovn-kubernetes {\n chain ovn-kube-local-gw-masq {\n  type nat hook postrouting priority srcnat + 1; policy accept;\n"+
			strings.Join(rules, "")+" }\n}\n' | nft -f -")
	}
	d.Vsctl(t, "add-port", "br-int", ovsEnd, "--", "set", "Interface", ovsEnd, "external_ids:iface-id=k8s-"+n.Name)
}

func nftFamilyMatch(f ipfamily.Family) string {
	if f == ipfamily.V6 {
		return "ip6"
	}
	return "ip"
}

func routeFlag(f ipfamily.Family) string {
	if f == ipfamily.V6 {
		return "-6"
	}
	return "-4"
}

// AddPod creates a pod namespace on node with the given addresses (one per
// family), plugged into br-int as logical switch port <node>_<name>.
func (d *Dataplane) AddPod(t testing.TB, node, name string, ips ...netip.Addr) *NetNS {
	t.Helper()
	pod := d.AddPodPort(t, node, name, ips...)
	d.OVN.AddPod(t, node, name, ips...)
	return pod
}

// AddPodPort is AddPod without the logical switch port (add it to NB with
// OVN.AddPod; ovn-controller binds it then).
func (d *Dataplane) AddPodPort(t testing.TB, node, name string, ips ...netip.Addr) *NetNS {
	t.Helper()
	d.pods++
	n := d.Topo.Node(node)
	pod := NewNetNS(t, "oe-pod")
	ovsEnd := fmt.Sprintf("p%d-o", d.pods)
	Veth(t, d.OVS, ovsEnd, pod, "eth0")
	pod.MustRun(t, "ip", "link", "set", "eth0", "address", MAC(ips[0]))
	for _, ip := range ips {
		f := ipfamily.Of(ip)
		for _, s := range n.Subnets {
			if ipfamily.OfPrefix(s) == f {
				pod.Addr(t, "eth0", netip.PrefixFrom(ip, s.Bits()).String())
				pod.MustRun(t, "ip", routeFlag(f), "route", "add", "default", "via", ipfamily.Nth(s, 1).String())
			}
		}
	}
	d.Vsctl(t, "add-port", "br-int", ovsEnd, "--", "set", "Interface", ovsEnd, "external_ids:iface-id="+node+"_"+name)
	return pod
}

// Announce makes host answer for ip on its eth0 (as MetalLB's layer-2 mode
// would on the node it elected) and tells the external network at once: a
// gratuitous ARP for IPv4, an unsolicited neighbour advertisement for IPv6.
func (d *Dataplane) Announce(t testing.TB, node string, ip netip.Addr) {
	t.Helper()
	h := d.Hosts[node]
	f := ipfamily.Of(ip)
	plen := "/32"
	if f == ipfamily.V6 {
		plen = "/128"
	}
	// IPv6: deprecated at once (preferred_lft 0), so that the host never
	// picks it as a source address of its own — a masquerade, for example —
	// while it still answers neighbour solicitations for it (MetalLB, which
	// this plays, puts no address on the interface at all).
	if out, err := h.Run("ip", "addr", "replace", ip.String()+plen, "dev", "eth0", "nodad", "preferred_lft", "0"); err != nil && f == ipfamily.V6 {
		t.Fatalf("announce %s on %s: %v", ip, node, err)
	} else if err != nil {
		if _, err := h.Run("ip", "addr", "replace", ip.String()+plen, "dev", "eth0"); err != nil {
			t.Fatalf("announce %s on %s: %v (%s)", ip, node, err, out)
		}
	}
	if f == ipfamily.V4 {
		// arping blocks about a second: let it run on its own.
		cmd := exec.Command(d.bins["ip"], "netns", "exec", h.Name, d.bins["arping"], "-q", "-U", "-c", "1", "-I", "eth0", "-s", ip.String(), ip.String())
		if err := cmd.Start(); err == nil {
			go cmd.Wait()
		}
		return
	}
	if err := h.Do(func() error { return sendUnsolicitedNA("eth0", ip) }); err != nil {
		t.Fatalf("unsolicited NA for %s from %s: %v", ip, node, err)
	}
}

// Withdraw removes ip from host's eth0.
func (d *Dataplane) Withdraw(t testing.TB, node string, ip netip.Addr) {
	t.Helper()
	plen := "/32"
	if ipfamily.Of(ip) == ipfamily.V6 {
		plen = "/128"
	}
	_, _ = d.Hosts[node].Run("ip", "addr", "del", ip.String()+plen, "dev", "eth0")
}

// CutGateway makes node's gateway router unreachable from the external
// network, as a dead node's is: the external bridge drops every frame from
// or to its MAC. (All gateway routers run on the one chassis here, so
// killing a node's host namespace alone leaves its GR forwarding.)
func (d *Dataplane) CutGateway(t testing.TB, node string) {
	t.Helper()
	mac := MAC(d.Topo.Node(node).ExternalIPs[0].Addr())
	conf := fmt.Sprintf("table bridge oe-cut-%[1]s {\n chain cut { type filter hook forward priority -200; policy accept;\n  ether saddr %[2]s drop\n  ether daddr %[2]s drop\n }\n}\n", node, mac)
	d.Bridge.MustRun(t, "sh", "-c", "printf '"+conf+"' | nft -f -")
}

// RestoreGateway undoes CutGateway.
func (d *Dataplane) RestoreGateway(t testing.TB, node string) {
	t.Helper()
	d.Bridge.MustRun(t, "nft", "delete", "table", "bridge", "oe-cut-"+node)
}
