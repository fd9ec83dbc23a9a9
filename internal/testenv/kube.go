package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ovn-egress/ovn-egress/pkg/k8s/client/clientset/versioned"
)

// ServiceCIDRs is the dual-stack --service-cluster-ip-range of the API server
// started by StartKube: ClusterIPs are allocated from it, nothing routes it.
const ServiceCIDRs = "10.96.0.0/16,fd00:10:96::/112"

const (
	modulePath = "github.com/ovn-egress/ovn-egress"
	fieldOwner = "testenv"
)

// Kube is one real Kubernetes control plane, etcd and kube-apiserver built by
// `make testbin`, running as child processes on free 127.0.0.1 ports with the
// CRDs of dist/crds installed. There are no controllers, scheduler or
// kubelet: namespaces never finish deleting, nothing is garbage collected and
// no EndpointSlices appear by themselves.
//
// Start one control plane per test package, in TestMain, and give every test
// its own namespace with Namespace. The package variable is written once,
// before m.Run, and only read afterwards:
//
//	var kube *testenv.Kube
//
//	func TestMain(m *testing.M) {
//		dir, err := os.MkdirTemp("", "kube-")
//		if err == nil {
//			kube, err = testenv.StartKube(dir)
//		}
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err) // missing binaries fail, never skip
//			os.Exit(1)
//		}
//		code := m.Run()
//		kube.Stop()
//		os.RemoveAll(dir)
//		os.Exit(code)
//	}
//
// A single test that needs its own control plane uses NewKube instead. To run
// the same server by hand: go run ./hack/kube-up.
type Kube struct {
	// Dir holds the certificates, the token file, etcd's data, the
	// kubeconfig and the logs etcd.out and kube-apiserver.out.
	Dir string
	// Config authenticates as an admin in system:masters.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// Client, Egress (the EgressService clientset) and Dynamic use Config.
	Client  kubernetes.Interface
	Egress  versioned.Interface
	Dynamic dynamic.Interface

	kubectl         string
	etcd, apiserver *daemon
	// etcdCmd, apiCmd start them again (KillAPIServer and the like).
	etcdCmd, apiCmd []string
	etcdURL         string
	mapper          *restmapper.DeferredDiscoveryRESTMapper
}

// kubeOptions lets this package's tests break the start on purpose.
type kubeOptions struct {
	etcdArgs, apiserverArgs []string
}

// NewKube starts a control plane in a temporary directory of t and stops it
// when t ends. Missing binaries fail the test.
func NewKube(t testing.TB) *Kube {
	t.Helper()
	k, err := StartKube(t.TempDir())
	if err != nil {
		t.Fatalf("start kube: %v", err)
	}
	t.Cleanup(k.Stop)
	return k
}

// StartKube starts etcd and kube-apiserver with their files in dir, waits
// for /readyz, writes dir/kubeconfig and installs every CRD of dist/crds.
// If either process exits while starting, the error quotes the end of its
// log. The caller must call Stop.
func StartKube(dir string) (*Kube, error) {
	k, err := startKube(dir, kubeOptions{})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// startKube returns the (stopped) Kube even on error, for the tests.
func startKube(dir string, o kubeOptions) (*Kube, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	bins, err := testbinPaths(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	k := &Kube{Dir: dir, kubectl: bins["kubectl"], Kubeconfig: filepath.Join(dir, "kubeconfig")}
	caPEM, err := writeKubePKI(dir)
	if err != nil {
		return nil, err
	}
	// Free ports are found by closing a listener, so another process can take
	// one before etcd or the apiserver binds it: retry on that only.
	for attempt := 1; ; attempt++ {
		err = k.launch(bins, caPEM, o)
		if err == nil {
			break
		}
		k.Stop()
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return k, err
		}
	}
	if err := k.KubeconfigFor(k.Config, k.Kubeconfig); err != nil {
		k.Stop()
		return k, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Apply(ctx, filepath.Join(root, "dist", "crds")); err != nil {
		k.Stop()
		return k, fmt.Errorf("install CRDs: %w", err)
	}
	return k, nil
}

// launch starts etcd and then kube-apiserver on fresh ports and builds the
// clients once /readyz answers.
func (k *Kube) launch(bins map[string]string, caPEM []byte, o kubeOptions) error {
	ports, err := FreePorts(3)
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	dataDir := filepath.Join(k.Dir, "etcd")
	if err := os.RemoveAll(dataDir); err != nil {
		return fmt.Errorf("clean etcd data: %w", err)
	}
	k.etcdURL = etcdURL
	k.etcdCmd = append([]string{bins["etcd"],
		"--name=testenv", "--data-dir=" + dataDir, "--unsafe-no-fsync", "--log-level=warn",
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL}, o.etcdArgs...)
	k.etcd, err = startDaemon(k.Dir, "etcd", nil, k.etcdCmd[0], k.etcdCmd[1:]...)
	if err != nil {
		return err
	}
	if err := k.waitEtcd(); err != nil {
		return err
	}

	token, err := randomHex(32)
	if err != nil {
		return err
	}
	tokens := filepath.Join(k.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,admin,admin-uid,"system:masters"`+"\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	port := strconv.Itoa(ports[2])
	k.apiCmd = append([]string{bins["kube-apiserver"],
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + port,
		"--cert-dir=" + k.Dir,
		"--tls-cert-file=" + filepath.Join(k.Dir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(k.Dir, "apiserver.key"),
		// No anonymous requests: one without credentials gets 401, as the API
		// reference documents, instead of 403 for system:anonymous.
		"--anonymous-auth=false",
		"--token-auth-file=" + tokens, "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(k.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(k.Dir, "sa.key"),
		"--service-cluster-ip-range=" + ServiceCIDRs,
		// No endpoint reconciler: it refuses a loopback advertise address. No
		// ServiceAccount admission: no controller creates the tokens it wants.
		"--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount",
	}, o.apiserverArgs...)
	k.apiserver, err = startDaemon(k.Dir, "kube-apiserver", nil, k.apiCmd[0], k.apiCmd[1:]...)
	if err != nil {
		return err
	}
	k.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + port,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		// Tests make many quick requests; the client default of 5 QPS would
		// make them slow without making them any more real.
		QPS: 200, Burst: 400,
	}
	if err := k.waitAPIServer(); err != nil {
		return err
	}
	return k.newClients()
}

func (k *Kube) newClients() error {
	var err error
	if k.Client, err = kubernetes.NewForConfig(k.Config); err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if k.Egress, err = versioned.NewForConfig(k.Config); err != nil {
		return fmt.Errorf("egress client: %w", err)
	}
	if k.Dynamic, err = dynamic.NewForConfig(k.Config); err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	k.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(k.Client.Discovery()))
	return nil
}

// Stop stops kube-apiserver and then etcd: SIGTERM, then SIGKILL after a
// grace period. Stopping etcd first would leave the apiserver retrying it for
// about 25 s. Safe to call twice.
func (k *Kube) Stop() {
	if k.apiserver != nil {
		k.apiserver.stop(15 * time.Second)
	}
	if k.etcd != nil {
		k.etcd.stop(10 * time.Second)
	}
}

// Kubectl runs the kubectl of `make testbin` with Kubeconfig (a later
// --kubeconfig in args wins) and returns its standard output. The error
// carries kubectl's standard error.
func (k *Kube) Kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	full := append([]string{"--kubeconfig=" + k.Kubeconfig, "--cache-dir=" + filepath.Join(k.Dir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(ctx, k.kubectl, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// KubectlPath is the kubectl binary that Kubectl runs.
func (k *Kube) KubectlPath() string { return k.kubectl }

// Namespace creates a namespace named after the test with a random suffix.
// It is deleted when t ends, without waiting: with no namespace controller
// it stays Terminating.
func (k *Kube) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: dnsPrefix(t.Name(), 40) + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = k.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// ServiceAccountConfig returns a config that authenticates as the
// ServiceAccount namespace/name with a token from the TokenRequest API. The
// namespace and the ServiceAccount are created when missing; what the
// account may do is up to the RBAC objects applied.
func (k *Kube) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	_, err := k.Client.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	_, err = k.Client.CoreV1().ServiceAccounts(namespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	expiry := int64((24 * time.Hour).Seconds())
	tr, err := k.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for service account %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(k.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// KubeconfigFor writes a kubeconfig file (mode 0600) at path that connects
// and authenticates as cfg does, so that a process such as the product or
// kubectl can run as that identity.
func (k *Kube) KubeconfigFor(cfg *rest.Config, path string) error {
	const name = "testenv"
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
		TLSServerName:            cfg.ServerName,
	}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{
		Token: cfg.BearerToken, TokenFile: cfg.BearerTokenFile,
		ClientCertificate: cfg.CertFile, ClientCertificateData: cfg.CertData,
		ClientKey: cfg.KeyFile, ClientKeyData: cfg.KeyData,
		Username: cfg.Username, Password: cfg.Password,
		Impersonate: cfg.Impersonate.UserName, ImpersonateUID: cfg.Impersonate.UID,
		ImpersonateGroups: cfg.Impersonate.Groups, ImpersonateUserExtra: cfg.Impersonate.Extra,
	}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: metav1.NamespaceDefault}
	c.CurrentContext = name
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// repoRoot walks up from the working directory to this module's go.mod.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	moduleLine := regexp.MustCompile(`(?m)^module\s+` + regexp.QuoteMeta(modulePath) + `\s*$`)
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && moduleLine.Match(b) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod of %s above %s", modulePath, wd)
		}
	}
}

// testbinPaths finds kube-apiserver, etcd and kubectl in $TESTBIN_DIR, or
// else in <repo root>/bin/testbin.
func testbinPaths(root string) (map[string]string, error) {
	dir := os.Getenv("TESTBIN_DIR")
	if dir == "" {
		dir = filepath.Join(root, "bin", "testbin")
	}
	paths := map[string]string{}
	var missing []string
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, name)
			continue
		}
		paths[name] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s not found in %s; build them with `make testbin` (or point TESTBIN_DIR at them)",
			errMissing, strings.Join(missing, ", "), dir)
	}
	return paths, nil
}

// FreePorts returns n distinct ports that were free on 127.0.0.1.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// paced wraps a readiness check for waitFor so that it runs at most once per
// interval while waitFor still notices a daemon's exit within milliseconds.
func paced(interval time.Duration, cond func() error) func() error {
	var next time.Time
	last := errors.New("not checked yet")
	return func() error {
		if time.Now().Before(next) {
			return last
		}
		next = time.Now().Add(interval)
		last = cond()
		return last
	}
}

func httpOK(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// dnsPrefix turns s into a lower-case DNS label of at most max characters.
func dnsPrefix(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= max {
			break
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" || out[0] < 'a' {
		out = "t" + out
	}
	return out
}

// TestbinPath is another binary of `make testbin` (helm): in $TESTBIN_DIR,
// or else in <repo root>/bin/testbin; missing, the error says how to build it.
func TestbinPath(name string) (string, error) {
	dir := os.Getenv("TESTBIN_DIR")
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin", "testbin")
	}
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s not found in %s; build it with `make testbin` (or point TESTBIN_DIR at it)", errMissing, name, dir)
	}
	return p, nil
}

// RunWithKube runs a package's tests against one Kube started in a fresh
// temporary directory named after prefix, stops it and removes the
// directory after, and returns m.Run's code; a Kube that does not start
// fails the package (missing binaries never skip it). *k is set before
// any test runs; tests only read it.
func RunWithKube(m *testing.M, prefix string, k **Kube) int {
	dir, err := os.MkdirTemp("", prefix)
	if err == nil {
		*k, err = StartKube(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "start kube:", err)
		return 1
	}
	code := m.Run()
	(*k).Stop()
	os.RemoveAll(dir)
	return code
}

// KillAPIServer SIGKILLs kube-apiserver (StartAPIServer brings it back on
// the same address: clients see a restart).
func (k *Kube) KillAPIServer() { k.apiserver.kill() }

// StartAPIServer starts kube-apiserver again after KillAPIServer and waits
// for /readyz.
func (k *Kube) StartAPIServer() error {
	<-k.apiserver.done
	var err error
	if k.apiserver, err = startDaemon(k.Dir, "kube-apiserver", nil, k.apiCmd[0], k.apiCmd[1:]...); err != nil {
		return err
	}
	return k.waitAPIServer()
}

// KillEtcd SIGKILLs etcd (its data stays: StartEtcd resumes it).
func (k *Kube) KillEtcd() { k.etcd.kill() }

// StartEtcd starts etcd again on its data after KillEtcd and waits for
// its /health and then kube-apiserver's /readyz (the API server serves
// again only once it has reconnected).
func (k *Kube) StartEtcd() error {
	<-k.etcd.done
	var err error
	if k.etcd, err = startDaemon(k.Dir, "etcd", nil, k.etcdCmd[0], k.etcdCmd[1:]...); err != nil {
		return err
	}
	if err := k.waitEtcd(); err != nil {
		return err
	}
	return k.waitAPIServer()
}

// waitEtcd waits for etcd's /health (failing at once if etcd exits).
func (k *Kube) waitEtcd() error {
	plain := &http.Client{Timeout: 2 * time.Second}
	return waitFor(30*time.Second, "etcd /health", paced(50*time.Millisecond, func() error {
		return httpOK(plain, k.etcdURL+"/health")
	}), k.etcd)
}

// waitAPIServer waits for kube-apiserver's /readyz (a restarted one may
// take a moment to get its port back from the killed process).
func (k *Kube) waitAPIServer() error {
	hc, err := rest.HTTPClientFor(k.Config)
	if err != nil {
		return fmt.Errorf("http client: %w", err)
	}
	hc.Timeout = 2 * time.Second
	return waitFor(60*time.Second, "kube-apiserver /readyz", paced(100*time.Millisecond, func() error {
		return httpOK(hc, k.Config.Host+"/readyz")
	}), k.etcd, k.apiserver)
}
