// Command kube-up starts the tests' Kubernetes control plane by hand, for
// debugging: etcd and kube-apiserver from bin/testbin (build them with `make
// testbin`) on free 127.0.0.1 ports, with the CRDs of dist/crds installed. It
// prints the `export KUBECONFIG=...` line to use it and stays up until
// Ctrl-C. Run it from the repository:
//
//	go run ./hack/kube-up [-dir DIR]
//
// Without -dir it works in a new temporary directory and removes it on exit;
// with -dir the directory (certificates, etcd data, logs) is kept.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kube-up:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "directory for certificates, etcd data, kubeconfig and logs (kept on exit); default: a temporary one, removed on exit")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	workDir := *dir
	if workDir == "" {
		tmp, err := os.MkdirTemp("", "kube-up-")
		if err != nil {
			return fmt.Errorf("temporary directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		workDir = tmp
	} else if abs, err := filepath.Abs(workDir); err == nil {
		workDir = abs
	}

	start := time.Now()
	kube, err := testenv.StartKube(workDir)
	if err != nil {
		return err
	}
	defer kube.Stop()

	fmt.Printf("kube-apiserver %s ready in %s (logs: %s/{etcd,kube-apiserver}.out)\n",
		kube.Config.Host, time.Since(start).Round(time.Millisecond), workDir)
	fmt.Printf("export KUBECONFIG=%s\n", kube.Kubeconfig)
	fmt.Printf("alias kubectl=%s\n", kube.KubectlPath())
	fmt.Println("Ctrl-C stops it.")
	<-ctx.Done()
	fmt.Println("stopping kube-apiserver, then etcd")
	return nil
}
