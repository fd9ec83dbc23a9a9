#!/usr/bin/env bash
# Builds the test binaries (kube-apiserver, etcd, kubectl; MetalLB's
# controller and speaker; helm) from the Go module proxy only, pinned by
# hack/testbin/go.mod + go.sum and hack/metallb/go.mod + go.sum. Go's build cache makes a
# re-run cheap (seconds), so it always runs `go build` and lets Go decide
# staleness. A cold build takes about 5-6 minutes once per machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${TESTBIN_DIR:-$ROOT/bin/testbin}
cd "$ROOT/hack/testbin"
K8S_VERSION=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
V=k8s.io/component-base/version
LDF="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean"
mkdir -p "$OUT"
go build -ldflags "$LDF" -o "$OUT/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3
# go names the etcd main after its import path (.../server/v3 -> "server")
if [[ -f $OUT/server ]]; then mv -f "$OUT/server" "$OUT/etcd"; fi
"$OUT/etcd" --version | sed -n 1p
"$OUT/kubectl" version --client | sed -n 1p
# MetalLB's controller and speaker (the e2e's load-balancer announcer),
# pinned by hack/metallb/go.mod + go.sum (about 70 s cold).
cd "$ROOT/hack/metallb"
go build -o "$OUT/metallb-controller" go.universe.tf/metallb/controller
go build -o "$OUT/metallb-speaker" go.universe.tf/metallb/speaker
rm -rf "$OUT/metallb-crds"
mkdir -p "$OUT/metallb-crds"
cp "$(go list -m -f '{{.Dir}}' go.universe.tf/metallb)"/config/crd/bases/*.yaml "$OUT/metallb-crds/"
chmod u+w "$OUT"/metallb-crds/*.yaml
echo "metallb $(go list -m -f '{{.Version}}' go.universe.tf/metallb)"
# helm, for the chart's tests (lint, template = dist/, install), pinned by
# hack/helm/go.mod + go.sum.
cd "$ROOT/hack/helm"
go build -o "$OUT/helm" helm.sh/helm/v3/cmd/helm
"$OUT/helm" version --short
