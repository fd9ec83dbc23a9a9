package kind

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Every knob of the suite is a flag with an environment default, so
// hack/run.sh and CI set them the same way a developer does.
var (
	flagKubeconfig = flag.String("kubeconfig", os.Getenv("KUBECONFIG"),
		"kubeconfig of the kind cluster (hack/up.sh writes one) [$KUBECONFIG]")
	flagOCI = flag.String("oci", envOr("OCI_BIN", "docker"),
		"container CLI that runs the kind nodes and the external container [$OCI_BIN]")
	flagExternal = flag.String("external-container", envOr("E2E_EXTERNAL_CONTAINER", "ovn-egress-e2e-ext"),
		"the external container on the kind network running `echo serve` [$E2E_EXTERNAL_CONTAINER]")
	flagKindNetwork = flag.String("kind-network", envOr("E2E_KIND_NETWORK", "kind"),
		"container network of the kind nodes and the external container [$E2E_KIND_NETWORK]")
	flagEchoImage = flag.String("echo-image", envOr("E2E_ECHO_IMAGE", "ovn-egress-e2e-echo:dev"),
		"image of the backend pods (test/e2e/kind/echo), loaded into kind [$E2E_ECHO_IMAGE]")
	flagFamilies = flag.String("families", envOr("E2E_FAMILIES", "IPv4,IPv6"),
		"IP families every scenario runs for; each must exist in the cluster and on the external container [$E2E_FAMILIES]")
	flagClusterSubnets = flag.String("cluster-subnets", envOr("E2E_CLUSTER_SUBNETS", "10.244.0.0/16,fd00:10:244::/48"),
		"pod networks: a source inside them seen outside is a leak [$E2E_CLUSTER_SUBNETS]")
	flagMetalLBNamespace = flag.String("metallb-namespace", envOr("E2E_METALLB_NAMESPACE", "metallb-system"),
		"namespace of MetalLB's configuration [$E2E_METALLB_NAMESPACE]")
	flagMetalLBPool = flag.String("metallb-pool", envOr("E2E_METALLB_POOL", "ovn-egress-e2e"),
		"IPAddressPool the suite's L2Advertisements announce [$E2E_METALLB_POOL]")
	flagNBSelector = flag.String("nb-pod-selector", envOr("E2E_NB_POD_SELECTOR", "app=ovnkube-node"),
		"label selector (namespace ovn-kubernetes) of the pods whose nb-ovsdb container holds an NB the product writes: "+
			"one per node in interconnect (ovnkube-node), or the one zone controller with a central NB (E2E_MODE=central: app=ovnkube-zone-controller) [$E2E_NB_POD_SELECTOR]")
)

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// TestMain refuses to run without a cluster: a missing KUBECONFIG, an API
// server that does not answer, or a missing container CLI or external
// container fails the run at once with what to do, instead of letting every
// test skip and the run count as a pass.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := preflight(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/kind: %v\n\nThis suite needs the kind cluster that test/e2e/kind/hack/up.sh creates; "+
			"run it all with test/e2e/kind/hack/e2e.sh (see test/e2e/kind/README.md).\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func preflight() error {
	if *flagKubeconfig == "" {
		return errors.New("KUBECONFIG is not set (nor -kubeconfig): no cluster to test")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *flagKubeconfig)
	if err != nil {
		return fmt.Errorf("KUBECONFIG=%s: %w", *flagKubeconfig, err)
	}
	cfg.Timeout = 10 * time.Second
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for KUBECONFIG=%s: %w", *flagKubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("API server of KUBECONFIG=%s (%s) is not ready: %w", *flagKubeconfig, cfg.Host, err)
	}
	if _, err := exec.LookPath(*flagOCI); err != nil {
		return fmt.Errorf("container CLI %q (OCI_BIN) not found: %w", *flagOCI, err)
	}
	out, err := exec.CommandContext(ctx, *flagOCI, "inspect", "-f", "{{.State.Running}}", *flagExternal).CombinedOutput()
	if err != nil {
		return fmt.Errorf("external container %q (E2E_EXTERNAL_CONTAINER): %s: %w", *flagExternal, strings.TrimSpace(string(out)), err)
	}
	if state := strings.TrimSpace(string(out)); state != "true" {
		return fmt.Errorf("external container %q (E2E_EXTERNAL_CONTAINER) is not running (running=%s)", *flagExternal, state)
	}
	return nil
}
