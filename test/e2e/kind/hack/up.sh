#!/usr/bin/env bash
# Creates the kind cluster: ovn-kubernetes at the pinned commit through its
# own contrib/kind.sh, with its egress-service feature off, in its default
# interconnect deployment (every node its own zone with its own NB; with
# E2E_MODE=central one zone holding every node instead), then MetalLB (L2)
# with an address pool on the kind network.
source "$(dirname "$0")/common.sh"
need git "$OCI_BIN" kind kubectl go make
mkdir -p "$WORK_DIR"

src=$WORK_DIR/ovn-kubernetes
if [[ ! -d $src/.git ]] || [[ $(git -C "$src" rev-parse HEAD) != "$OVN_KUBERNETES_REF" ]]; then
  log "ovn-kubernetes $OVN_KUBERNETES_REF"
  rm -rf "$src"
  git init -q "$src"
  git -C "$src" remote add origin "$OVN_KUBERNETES_REPO"
  git -C "$src" fetch -q --depth 1 origin "$OVN_KUBERNETES_REF"
  git -C "$src" checkout -q FETCH_HEAD
fi

# contrib/kind.sh renders the manifests with --egress-service-enable=true;
# ovn-egress owns the feature, so ovn-kubernetes runs without it (its
# ovnkube.sh then passes no --enable-egress-service, i.e. false).
kindsh=$src/contrib/kind.sh
if grep -q -- '--egress-service-enable=true' "$kindsh"; then
  sed -i 's/--egress-service-enable=true/--egress-service-enable=false/' "$kindsh"
fi
grep -q -- '--egress-service-enable=false' "$kindsh" || {
  echo "$kindsh no longer passes --egress-service-enable: update up.sh for OVN_KUBERNETES_REF=$OVN_KUBERNETES_REF" >&2
  exit 1
}

if [[ -z $OVN_IMAGE ]]; then
  log "build the ovn-kubernetes image (go-controller binaries, then dist/images fedora-image)"
  make -C "$src/go-controller"
  OVN_IMAGE=ovn-daemonset-fedora:e2e
  make -C "$src/dist/images" IMAGE="$OVN_IMAGE" OCI_BIN="$OCI_BIN" fedora-image
fi

families=()
case $IP_FAMILY in
  dual) families=(--ipv6) ;;
  ipv6) families=(--no-ipv4 --ipv6) ;;
esac
nodes=$((KIND_NUM_WORKER + 1))
# ic: kind.sh's default, interconnect with one node per zone (no zone
# options; its own OVN_ENABLE_INTERCONNECT/KIND_NUM_NODES_PER_ZONE are
# cleared so the environment cannot change that). central: one zone of
# every node, whose NB the ovn-egress master writes.
zoning=()
if [[ $E2E_MODE == central ]]; then
  zoning=(--enable-interconnect --nodes-per-zone "$nodes")
fi
log "kind.sh: $nodes nodes, E2E_MODE=$E2E_MODE ${zoning[*]:-(one zone per node)}, $GATEWAY_MODE gateway, $IP_FAMILY, image $OVN_IMAGE"
(
  cd "$src/contrib" || exit 1
  unset OVN_ENABLE_INTERCONNECT KIND_NUM_NODES_PER_ZONE
  K8S_VERSION=$K8S_VERSION OCI_BIN=$OCI_BIN ./kind.sh \
    --cluster-name "$KIND_CLUSTER_NAME" \
    --ovn-image "$OVN_IMAGE" \
    "${zoning[@]}" \
    --num-workers "$KIND_NUM_WORKER" \
    --gateway-mode "$GATEWAY_MODE" \
    --allow-system-writes \
    "${families[@]}"
)

log "check: ovn-kubernetes runs without its egress-service feature"
values=$(kubectl -n ovn-kubernetes get daemonsets,deployments -o \
  jsonpath='{range .items[*]}{range .spec.template.spec.containers[*]}{range .env[?(@.name=="OVN_EGRESSSERVICE_ENABLE")]}{.value}{"\n"}{end}{end}{end}' | sort -u)
if [[ $values != false ]]; then
  echo "OVN_EGRESSSERVICE_ENABLE in ovn-kubernetes' workloads is '${values//$'\n'/,}', want only 'false'" >&2
  exit 1
fi
log "check: the zones fit E2E_MODE=$E2E_MODE"
check_zones

log "MetalLB $METALLB_VERSION (L2)"
kubectl apply -f "https://raw.githubusercontent.com/metallb/metallb/$METALLB_VERSION/config/manifests/metallb-native.yaml"
kubectl -n metallb-system rollout status deployment/controller --timeout=5m
kubectl -n metallb-system rollout status daemonset/speaker --timeout=5m
# kind labels its control plane exclude-from-external-load-balancers, and
# MetalLB honours it; the control plane can be an egress host like any node.
kubectl label nodes -l node-role.kubernetes.io/control-plane node.kubernetes.io/exclude-from-external-load-balancers- >/dev/null || true

# The pool: the top of the kind network's IPv4 /16 and a /120 of its IPv6 /64.
addresses=()
for subnet in $("$OCI_BIN" network inspect "$KIND_NETWORK" -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}'); do
  if [[ $subnet =~ ^([0-9]+\.[0-9]+)\.0\.0/16$ ]]; then
    [[ $IP_FAMILY != ipv6 ]] && addresses+=("${BASH_REMATCH[1]}.255.200-${BASH_REMATCH[1]}.255.250")
  elif [[ $subnet =~ ^([0-9a-f]+:[0-9a-f]+:[0-9a-f]+:[0-9a-f]+)::/64$ ]]; then
    [[ $IP_FAMILY != ipv4 ]] && addresses+=("${BASH_REMATCH[1]}:ffff::/120")
  else
    echo "network $KIND_NETWORK: subnet $subnet is neither an IPv4 /16 nor an IPv6 /64; set the pool by hand" >&2
    exit 1
  fi
done
[[ ${#addresses[@]} -gt 0 ]] || { echo "network $KIND_NETWORK has no subnet for $IP_FAMILY" >&2; exit 1; }
pool=$WORK_DIR/metallb-pool.yaml
{
  echo "apiVersion: metallb.io/v1beta1"
  echo "kind: IPAddressPool"
  echo "metadata: {name: $E2E_METALLB_POOL, namespace: metallb-system}"
  echo "spec:"
  echo "  addresses:"
  for a in "${addresses[@]}"; do echo "  - $a"; done
} >"$pool"
# No L2Advertisement here: the suite makes one per Service, restricted to
# the node carrying that Service's egress-service label.
retry 24 kubectl apply -f "$pool" # the webhook answers a little after the rollout
log "cluster ready: KUBECONFIG=$KUBECONFIG"
