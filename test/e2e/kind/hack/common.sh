# shellcheck shell=bash
# Sourced by the other scripts: the pinned versions and every setting, each
# overridable from the environment.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_ROOT=$(cd "$E2E_DIR/../../.." && pwd)

# --- pinned versions -------------------------------------------------------
# ovn-kubernetes: the commit whose contrib/kind.sh creates the cluster and
# whose image runs it (the research notes' "NEW" snapshot, 2026-08-21).
OVN_KUBERNETES_REPO=${OVN_KUBERNETES_REPO:-https://github.com/ovn-kubernetes/ovn-kubernetes.git}
OVN_KUBERNETES_REF=${OVN_KUBERNETES_REF:-8871cd9cec9c45d6da1baf9e3b06eb575f49039c}
# kindest/node for kind v0.33.0 (CI installs that kind), pinned by digest;
# 1.35 is the minor the pinned ovn-kubernetes CI runs.
K8S_VERSION=${K8S_VERSION:-v1.35.8@sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0}
METALLB_VERSION=${METALLB_VERSION:-v0.15.3}

# --- the cluster -----------------------------------------------------------
# ic (default): ovn-kubernetes' default interconnect deployment, every node
# its own zone with its own NB, and ovn-egress from dist/ic (the master
# selects hosts, every node agent translates its own zone into its node's
# NB). central: one zone holding every node (kind.sh --nodes-per-zone), and
# ovn-egress from dist/master + dist/node (the master writes that one NB).
E2E_MODE=${E2E_MODE:-ic}
KIND_CLUSTER_NAME=${KIND_CLUSTER_NAME:-ovn}
KIND_NUM_WORKER=${KIND_NUM_WORKER:-2}     # + the control plane = 3 nodes, all schedulable
GATEWAY_MODE=${GATEWAY_MODE:-shared}      # shared | local (ovn-kubernetes --gateway-mode)
IP_FAMILY=${IP_FAMILY:-dual}              # ipv4 | ipv6 | dual
OCI_BIN=${OCI_BIN:-docker}
KIND_NETWORK=${KIND_NETWORK:-kind}
WORK_DIR=${WORK_DIR:-$REPO_ROOT/bin/e2e-kind}
export KUBECONFIG=${KUBECONFIG:-$WORK_DIR/kubeconfig}
# An ovn-kubernetes image to use instead of building one from
# OVN_KUBERNETES_REF (for example a cached build of the same commit).
OVN_IMAGE=${OVN_IMAGE:-}
JOIN_SUBNETS=${JOIN_SUBNETS:-100.64.0.0/16,fd98::/64}
# Where a node's own NB socket (ovnnb_db.sock) lies on the node, in ic:
# ovn-kubernetes' ovnkube-node pod (dist/templates/ovnkube-single-node-zone
# .yaml.j2) mounts the host's /var/run/openvswitch at /var/run/ovn in its
# nb-ovsdb container, whose ovsdb-server listens on
# /var/run/ovn/ovnnb_db.sock. deploy.sh mounts this directory at
# /var/run/ovn in the agent, so its --nb-address stays dist/ic's.
OVN_RUN_DIR_HOST=${OVN_RUN_DIR_HOST:-/var/run/openvswitch}

# --- ovn-egress and the suite ----------------------------------------------
OVN_EGRESS_IMAGE=${OVN_EGRESS_IMAGE:-ghcr.io/ovn-egress/ovn-egress:e2e}
E2E_ECHO_IMAGE=${E2E_ECHO_IMAGE:-ovn-egress-e2e-echo:dev}
E2E_EXTERNAL_CONTAINER=${E2E_EXTERNAL_CONTAINER:-ovn-egress-e2e-ext}
E2E_METALLB_POOL=${E2E_METALLB_POOL:-ovn-egress-e2e}
ARTIFACTS=${ARTIFACTS:-$WORK_DIR/artifacts}

case $IP_FAMILY in
  ipv4) E2E_FAMILIES_DEFAULT=IPv4 ;;
  ipv6) E2E_FAMILIES_DEFAULT=IPv6 ;;
  dual) E2E_FAMILIES_DEFAULT=IPv4,IPv6 ;;
  *) echo "IP_FAMILY=$IP_FAMILY: want ipv4, ipv6 or dual" >&2; exit 1 ;;
esac
E2E_FAMILIES=${E2E_FAMILIES:-$E2E_FAMILIES_DEFAULT}

# The ovn-kubernetes pods whose nb-ovsdb container holds an NB ovn-egress
# writes (the suite's ovn-nbctl checks, logs.sh): one per node in ic, the
# zone controller in central.
case $E2E_MODE in
  ic) E2E_NB_POD_SELECTOR_DEFAULT=app=ovnkube-node ;;
  central) E2E_NB_POD_SELECTOR_DEFAULT=app=ovnkube-zone-controller ;;
  *) echo "E2E_MODE=$E2E_MODE: want ic or central" >&2; exit 1 ;;
esac
E2E_NB_POD_SELECTOR=${E2E_NB_POD_SELECTOR:-$E2E_NB_POD_SELECTOR_DEFAULT}

log() { echo "=== [$(date +%H:%M:%S)] $*"; }

need() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null || { echo "missing command: $c (see test/e2e/kind/README.md, Prerequisites)" >&2; exit 1; }
  done
}

# retry N CMD...: run CMD until it succeeds, at most N times, 5 s apart.
retry() {
  local n=$1 i
  shift
  for ((i = 1; i <= n; i++)); do
    if "$@"; then return 0; fi
    echo "retry $i/$n: $*" >&2
    sleep 5
  done
  return 1
}

# check_zones fails unless the cluster's interconnect zones, as
# ovn-kubernetes annotates them on the Nodes (k8s.ovn.org/zone-name, what
# ovn-egress reads), fit E2E_MODE. ic: every node is its own zone, named
# after the node (dist/ic runs the agents with --zone=$(NODE_NAME)), and has
# its transit-switch address (k8s.ovn.org/node-transit-switch-port-ifaddr:
# other zones reroute to it). central: one zone holds every node.
check_zones() {
  local name zone transit zones=() bad=() distinct
  while IFS='|' read -r name zone transit; do
    [[ -n $name ]] || continue
    zones+=("$zone")
    if [[ $E2E_MODE == ic ]]; then
      [[ $zone == "$name" ]] || bad+=("node $name is in zone '$zone', want its own zone '$name'")
      [[ -n $transit ]] || bad+=("node $name has no k8s.ovn.org/node-transit-switch-port-ifaddr annotation")
    fi
  done < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"|"}{.metadata.annotations.k8s\.ovn\.org/zone-name}{"|"}{.metadata.annotations.k8s\.ovn\.org/node-transit-switch-port-ifaddr}{"\n"}{end}')
  ((${#zones[@]} > 0)) || bad+=("the cluster has no nodes")
  if [[ $E2E_MODE == central ]]; then
    distinct=$(printf '%s\n' "${zones[@]}" | sort -u)
    if [[ $(wc -l <<<"$distinct") != 1 || -z $distinct ]]; then
      bad+=("nodes are in zones '${distinct//$'\n'/,}': central needs one zone holding every node (the ovn-egress master writes its one NB)")
    fi
  fi
  if ((${#bad[@]} > 0)); then
    echo "E2E_MODE=$E2E_MODE does not fit this cluster (hack/up.sh creates it for E2E_MODE):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    return 1
  fi
  log "zones fit E2E_MODE=$E2E_MODE: $(printf '%s\n' "${zones[@]}" | sort -u | paste -sd, -)"
}
