#!/usr/bin/env bash
# Runs the suite against the cluster (extra arguments go to go test, e.g.
# -run TestNoSelector).
source "$(dirname "$0")/common.sh"
need go
mkdir -p "$ARTIFACTS"
export OCI_BIN E2E_ECHO_IMAGE E2E_EXTERNAL_CONTAINER E2E_FAMILIES E2E_METALLB_POOL E2E_NB_POD_SELECTOR
export E2E_KIND_NETWORK=$KIND_NETWORK
if [[ -z ${E2E_CLUSTER_SUBNETS:-} ]]; then
  E2E_CLUSTER_SUBNETS=$(kubectl -n ovn-kubernetes get configmap ovn-config -o jsonpath='{.data.net_cidr}' | tr ',' '\n' | cut -d/ -f1,2 | paste -sd, -)
  export E2E_CLUSTER_SUBNETS
fi
cd "$E2E_DIR" || exit 1
log "go test (E2E_MODE=$E2E_MODE, families $E2E_FAMILIES, $GATEWAY_MODE gateway)"
go test -count=1 -timeout 90m -v "$@" . 2>&1 | tee "$ARTIFACTS/e2e.log"
