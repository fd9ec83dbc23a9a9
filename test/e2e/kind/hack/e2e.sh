#!/usr/bin/env bash
# The one command: cluster, images, deploy, suite; logs into $ARTIFACTS
# when anything fails. KEEP_CLUSTER=false deletes the cluster at the end.
source "$(dirname "$0")/common.sh"
hack=$(dirname "$0")
collect() {
  local rc=$?
  if ((rc != 0)); then "$hack/logs.sh" || true; fi
  if [[ ${KEEP_CLUSTER:-true} == false ]]; then "$hack/down.sh" || true; fi
  exit $rc
}
trap collect EXIT
"$hack/up.sh"
"$hack/images.sh"
"$hack/deploy.sh"
"$hack/run.sh" "$@"
