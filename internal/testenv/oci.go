package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovn-egress/ovn-egress/internal/ociimage"
)

// The product as a kubelet runs it: its own image (make image), unpacked
// once, started through runc (Debian's) with what the chart's rendered pod
// template says — command and args, env (downward API values filled in),
// user, capabilities (the container runtime's default set, then drop and
// add), no_new_privs, a read-only root, the ServiceAccount token mounted
// where the kubelet mounts it, hostPath and emptyDir volumes, and the
// pod's network namespace (the node's own with hostNetwork). The harness
// writes none of those itself.
//
// Not reproduced, and so not tested here: probes (the tests scrape
// /healthz and /readyz themselves), resource limits and cgroups, seccomp
// and AppArmor profiles, image pulls, DNS (resolv.conf), and restarts
// (a test restarts a container itself).

// OCIPackages are the Debian packages the OCI harness needs.
const OCIPackages = "runc"

// ImageArchive is `make image`'s output, from the repository root.
func ImageArchive() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", "ovn-egress-image.tar"), nil
}

// ProductImage is the image unpacked: one read-only root shared by every
// container of a test binary.
type ProductImage struct {
	Image  *ociimage.Image
	Root   string
	Binary string // the product's binary inside Root (for its CLI, run on this machine)
}

var (
	imageOnce sync.Once
	image     *ProductImage
	imageErr  error
)

// UnpackProductImage unpacks the image archive (make image) into dir, once
// per process.
func UnpackProductImage(archive, dir string) (*ProductImage, error) {
	imageOnce.Do(func() {
		img, err := ociimage.Read(archive)
		if err != nil {
			imageErr = fmt.Errorf("the product's image: %w (build it with `make image`)", err)
			return
		}
		root := filepath.Join(dir, "image-root")
		if err := img.Unpack(root); err != nil {
			imageErr = fmt.Errorf("unpack %s: %w", archive, err)
			return
		}
		image = &ProductImage{Image: img, Root: root, Binary: filepath.Join(root, "usr", "local", "bin", "ovn-egress")}
	})
	return image, imageErr
}

// PodRun is one container of a rendered pod, and what a kubelet would give it.
type PodRun struct {
	// Name names the container for runc and its log (unique per test).
	Name      string
	Pod       corev1.PodSpec
	Container string
	// NetNS is the path of the pod's network namespace: a named namespace
	// the test made (/run/netns/NAME); with hostNetwork, the node's.
	NetNS string
	// Downward are the downward API's values by fieldPath (metadata.name,
	// metadata.namespace, spec.nodeName, status.podIP, status.hostIP).
	Downward map[string]string
	// HostPaths map a hostPath volume's path to the directory on this
	// machine that stands for it; a hostPath not listed fails the start.
	HostPaths map[string]string
	// ServiceAccount is the directory mounted at
	// /var/run/secrets/kubernetes.io/serviceaccount (Kube.PodIdentity).
	ServiceAccount string
	// APIServer is host:port the pod reaches the API server at, from its
	// network namespace (KUBERNETES_SERVICE_HOST and _PORT).
	APIServer string
}

// runtimeDefaultCaps are the capabilities a container runtime (containerd,
// CRI-O) gives a container before its securityContext drops and adds.
var runtimeDefaultCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// StartPod starts the container in its own bundle under dir and returns it
// as a member of ps: Stop sends SIGTERM (runc passes it on), Kill a SIGKILL
// to the container, Pid is the container's first process.
func (img *ProductImage) StartPod(t testing.TB, ps *Processes, dir string, r PodRun) *Process {
	t.Helper()
	bins, err := lookPaths(OCIPackages, "runc")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := img.runtimeSpec(dir, r)
	if err != nil {
		t.Fatalf("pod %s: %v", r.Name, err)
	}
	bundle := filepath.Join(dir, "bundle-"+r.Name)
	_ = os.RemoveAll(bundle)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "runc")
	id := r.Name
	runc := func(args ...string) *exec.Cmd {
		return exec.Command(bins["runc"], append([]string{"--root", state}, args...)...)
	}
	_ = runc("delete", "--force", id).Run() // a container left by a killed run of the same name
	p := ps.StartThen(func() { _ = runc("delete", "--force", id).Run() }, dir, r.Name, nil, bins["runc"], "--root", state, "run", "--bundle", bundle, id)
	p.d.signal = func(sig syscall.Signal) {
		if sig == syscall.SIGKILL {
			_ = runc("kill", id, "KILL").Run()
			return
		}
		_ = p.d.cmd.Process.Signal(sig) // runc run passes it on
	}
	p.d.pid = func() int {
		out, err := runc("state", id).Output()
		if err != nil {
			return 0
		}
		var st struct {
			Pid int `json:"pid"`
		}
		_ = json.Unmarshal(out, &st)
		return st.Pid
	}
	return p
}

// runtimeSpec builds the OCI runtime configuration of r.
func (img *ProductImage) runtimeSpec(dir string, r PodRun) (map[string]any, error) {
	c, err := Container(r.Pod, r.Container)
	if err != nil {
		return nil, err
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		return nil, fmt.Errorf("container %s: the harness shares one unpacked image between containers and runs read-only roots only", c.Name)
	}
	env, err := podEnv(c, r, img.Image.Config.Config.Env)
	if err != nil {
		return nil, err
	}
	args := podArgs(c, img.Image.Config.Config.Entrypoint, img.Image.Config.Config.Cmd, env)
	uid, gid := int64(0), int64(0)
	if ps := r.Pod.SecurityContext; ps != nil {
		if ps.RunAsUser != nil {
			uid = *ps.RunAsUser
		}
		if ps.RunAsGroup != nil {
			gid = *ps.RunAsGroup
		}
	}
	if sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		gid = *sc.RunAsGroup
	}
	caps := slices.Clone(runtimeDefaultCaps)
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			if d == "ALL" {
				caps = nil
				break
			}
			caps = slices.DeleteFunc(caps, func(x string) bool { return x == "CAP_"+string(d) })
		}
		for _, a := range sc.Capabilities.Add {
			if n := "CAP_" + string(a); !slices.Contains(caps, n) {
				caps = append(caps, n)
			}
		}
	}
	effective := caps
	if uid != 0 {
		effective = []string{} // no ambient capabilities: a non-root process holds none
	}
	noNewPrivs := sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	mounts, err := podMounts(dir, c, r)
	if err != nil {
		return nil, err
	}
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	return map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false, "user": map[string]any{"uid": uid, "gid": gid},
			"args": args, "env": env, "cwd": cwd, "noNewPrivileges": noNewPrivs,
			// No rlimits: the runtime's would need CAP_SYS_RESOURCE, which
			// this machine's root lacks; the process inherits the harness's.
			"capabilities": map[string]any{"bounding": caps, "effective": effective, "permitted": effective, "inheritable": []string{}, "ambient": []string{}},
		},
		"root":     map[string]any{"path": img.Root, "readonly": true},
		"hostname": r.Name,
		"mounts":   mounts,
		"linux": map[string]any{
			"namespaces": []map[string]any{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
				{"type": "network", "path": r.NetNS}},
			"maskedPaths": []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"},
			"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}, nil
}

// podEnv is the container's environment as the kubelet makes it: the
// image's, the API server's service variables, then the container's own
// (downward API references filled in).
func podEnv(c corev1.Container, r PodRun, image []string) ([]string, error) {
	env := slices.Clone(image)
	host, port, ok := strings.Cut(r.APIServer, ":")
	if !ok {
		return nil, fmt.Errorf("API server address %q: want host:port", r.APIServer)
	}
	env = append(env, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port, "KUBERNETES_SERVICE_PORT_HTTPS="+port)
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				return nil, fmt.Errorf("env %s: only fieldRef values are filled in by the harness", e.Name)
			}
			var found bool
			if v, found = r.Downward[e.ValueFrom.FieldRef.FieldPath]; !found {
				return nil, fmt.Errorf("env %s: no value for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		env = append(env, e.Name+"="+expand(v, env))
	}
	return env, nil
}

// podArgs combines the image's entrypoint and cmd with the container's
// command and args (Kubernetes' rules), $(VAR) expanded from env.
func podArgs(c corev1.Container, entrypoint, cmd []string, env []string) []string {
	args := slices.Clone(entrypoint)
	switch {
	case len(c.Command) > 0:
		args = slices.Clone(c.Command)
		args = append(args, c.Args...)
	case len(c.Args) > 0:
		args = append(args, c.Args...)
	default:
		args = append(args, cmd...)
	}
	for i, a := range args {
		args[i] = expand(a, env)
	}
	return args
}

// expand replaces $(NAME) with NAME's value in env (the last definition);
// an unknown reference stays as written, as the kubelet leaves it.
func expand(s string, env []string) string {
	for {
		i := strings.Index(s, "$(")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], ")")
		if j < 0 {
			return s
		}
		name := s[i+2 : i+j]
		val, found := "", false
		for _, kv := range env {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				val, found = v, true
			}
		}
		if !found {
			return s
		}
		s = s[:i] + val + s[i+j+1:]
	}
}

// podMounts are the runtime's standard mounts, the ServiceAccount's token
// and the container's volume mounts.
func podMounts(dir string, c corev1.Container, r PodRun) ([]map[string]any, error) {
	mounts := []map[string]any{
		{"destination": "/proc", "type": "proc", "source": "proc"},
		{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": []string{"nosuid", "noexec", "nodev"}},
		{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	bind := func(src, dst string, ro bool) map[string]any {
		opts := []string{"rbind", "rprivate"}
		if ro {
			opts = append(opts, "ro")
		}
		return map[string]any{"destination": dst, "type": "bind", "source": src, "options": opts}
	}
	if r.ServiceAccount != "" {
		mounts = append(mounts, bind(r.ServiceAccount, "/var/run/secrets/kubernetes.io/serviceaccount", true))
	}
	vols := map[string]corev1.Volume{}
	for _, v := range r.Pod.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: no such volume", m.Name)
		}
		var src string
		switch {
		case v.HostPath != nil:
			if src, ok = r.HostPaths[v.HostPath.Path]; !ok {
				return nil, fmt.Errorf("hostPath %s (volume %s): the test gave no directory for it", v.HostPath.Path, v.Name)
			}
		case v.EmptyDir != nil:
			d, err := os.MkdirTemp(dir, "emptydir-"+r.Name+"-")
			if err != nil {
				return nil, err
			}
			if err := os.Chmod(d, 0o777); err != nil {
				return nil, err
			}
			src = d
		default:
			return nil, fmt.Errorf("volume %s: the harness provides hostPath and emptyDir volumes only", v.Name)
		}
		mounts = append(mounts, bind(src, m.MountPath, m.ReadOnly))
	}
	return mounts, nil
}

// ScrapeAddress is where a container's metrics port is reached from the
// test: the port on 127.0.0.1 inside the pod's network namespace.
func ScrapeAddress(c corev1.Container, port string) (string, error) {
	for _, p := range c.Ports {
		if p.Name == port {
			return "127.0.0.1:" + strconv.Itoa(int(p.ContainerPort)), nil
		}
	}
	return "", fmt.Errorf("container %s has no port %q", c.Name, port)
}
