#!/usr/bin/env bash
# Regenerates every generated file in the repository:
#   pkg/nbdb, pkg/sbdb            libovsdb modelgen -extended, from the schemas committed there
#   pkg/nbdbext                   the same, for the newer NB tables ovn-egress uses where present
#   pkg/apis/.../zz_generated  deepcopy (k8s.io/code-generator)
#   pkg/k8s/client                 clientset (+fake), listers, informers (k8s.io/code-generator)
#   dist/crds                      the EgressService and EgressIP CRDs (sigs.k8s.io/controller-tools)
# Generator versions are pinned by hack/tools/go.mod. Run from anywhere; it
# operates on the tree that contains this script.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MOD=github.com/ovn-egress/ovn-egress
TOOLS=${TOOLS_DIR:-$ROOT/bin/tools}
HEADER=$ROOT/hack/boilerplate.go.txt
API_PKG=$MOD/pkg/apis/egressservice/v1
CLIENT_PKG=$MOD/pkg/k8s/client

mkdir -p "$TOOLS"
(cd "$ROOT/hack/tools" && go build -o "$TOOLS/" \
  github.com/ovn-kubernetes/libovsdb/cmd/modelgen \
  k8s.io/code-generator/cmd/deepcopy-gen \
  k8s.io/code-generator/cmd/client-gen \
  k8s.io/code-generator/cmd/lister-gen \
  k8s.io/code-generator/cmd/informer-gen \
  sigs.k8s.io/controller-tools/cmd/controller-gen)

cd "$ROOT"

# OVN models: the directories hold only generated code plus the schema.
for db in nb sb; do
  dir=pkg/${db}db
  find "$dir" -maxdepth 1 -name '*.go' -delete
  "$TOOLS/modelgen" -extended -p "${db}db" -o "$dir" "$dir/ovn-${db}.ovsschema"
done

# The tables of a newer NB schema whose new columns ovn-egress uses when the
# connected NB has them (NAT.match and NAT.priority: the NAT table of NB
# 7.11.0, Debian 13's OVN 25.03). pkg/nbdb stays at 7.0.0: libovsdb refuses an
# NB that lacks any column of a model.
find pkg/nbdbext -maxdepth 1 -name '*.go' -delete
"$TOOLS/modelgen" -extended -p nbdbext -o pkg/nbdbext pkg/nbdbext/ovn-nb.ovsschema

# Kubernetes API: deepcopy, then clientset, listers and informers — one
# client tree per API package (both are k8s.ovn.org/v1, which one clientset
# cannot hold twice): EgressService in pkg/k8s/client, EgressIP in
# pkg/k8s/client/egressip.
rm -rf pkg/k8s/client
gen_clients() { # api package, client package, output dir
  "$TOOLS/deepcopy-gen" --go-header-file "$HEADER" --output-file zz_generated.deepcopy.go "$1"
  "$TOOLS/client-gen" --go-header-file "$HEADER" --clientset-name versioned \
    --input-base "" --input "$1" \
    --output-pkg "$2/clientset" --output-dir "$3/clientset"
  "$TOOLS/lister-gen" --go-header-file "$HEADER" \
    --output-pkg "$2/listers" --output-dir "$3/listers" "$1"
  "$TOOLS/informer-gen" --go-header-file "$HEADER" \
    --versioned-clientset-package "$2/clientset/versioned" \
    --listers-package "$2/listers" \
    --output-pkg "$2/informers" --output-dir "$3/informers" "$1"
}
gen_clients "$API_PKG" "$CLIENT_PKG" pkg/k8s/client
gen_clients "$MOD/pkg/apis/egressip/v1" "$CLIENT_PKG/egressip" pkg/k8s/client/egressip

# CRD.
"$TOOLS/controller-gen" crd:crdVersions=v1 paths=./pkg/apis/... output:crd:artifacts:config=dist/crds
gofmt -w pkg/nbdb pkg/nbdbext pkg/sbdb pkg/k8s/client pkg/apis

# dist/'s Deployments, DaemonSets and RBAC from the Helm chart.
TOOLS_DIR=$TOOLS "$ROOT/hack/render-dist.sh"
