//go:build tools

// Package tools pins the test-only binaries that hack/build-testbin.sh builds:
// a real kube-apiserver, etcd and kubectl, all from the Go module proxy.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
