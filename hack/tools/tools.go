//go:build tools

// Package tools pins the code generators used by `make generate`:
// libovsdb's modelgen for pkg/nbdb and pkg/sbdb, k8s.io/code-generator for the
// EgressService deepcopy/clientset/listers/informers and controller-gen for the CRD.
package tools

import (
	_ "github.com/ovn-kubernetes/libovsdb/cmd/modelgen"
	_ "github.com/rhysd/actionlint/cmd/actionlint"
	_ "honnef.co/go/tools/cmd/staticcheck"
	_ "k8s.io/code-generator/cmd/applyconfiguration-gen"
	_ "k8s.io/code-generator/cmd/client-gen"
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/code-generator/cmd/informer-gen"
	_ "k8s.io/code-generator/cmd/lister-gen"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
