#!/usr/bin/env bash
# Builds the ovn-egress image (dist/Dockerfile) and the suite's echo image
# (test/e2e/kind/echo), and loads both into the kind cluster when it exists.
source "$(dirname "$0")/common.sh"
need "$OCI_BIN" kind

log "build $OVN_EGRESS_IMAGE"
"$OCI_BIN" build -f "$REPO_ROOT/dist/Dockerfile" -t "$OVN_EGRESS_IMAGE" \
  --build-arg VERSION="$(git -C "$REPO_ROOT" describe --tags --always --dirty 2>/dev/null || echo e2e)" "$REPO_ROOT"
log "build $E2E_ECHO_IMAGE"
"$OCI_BIN" build -t "$E2E_ECHO_IMAGE" "$E2E_DIR/echo"

if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME"; then
  for image in "$OVN_EGRESS_IMAGE" "$E2E_ECHO_IMAGE"; do
    log "kind load $image"
    kind load docker-image --name "$KIND_CLUSTER_NAME" "$image"
  done
fi
