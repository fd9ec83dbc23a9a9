#!/usr/bin/env bash
# Deletes the kind cluster and the external container.
source "$(dirname "$0")/common.sh"
"$OCI_BIN" rm -f "$E2E_EXTERNAL_CONTAINER" >/dev/null 2>&1 || true
kind delete cluster --name "$KIND_CLUSTER_NAME"
