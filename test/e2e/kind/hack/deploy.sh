#!/usr/bin/env bash
# Starts the external container on the kind network and deploys dist/ into
# the cluster with the cluster's own subnets, the image loaded by images.sh
# and the e2e settings (connect health checks, the agent-off node affinity
# the failover scenario uses).
#
# E2E_MODE=ic (default) renders dist/ic: the master only selects hosts
# (--mode=ic, no NB), every node agent translates its own zone
# (--zone=$(NODE_NAME)) into its node's NB over the local unix socket.
# E2E_MODE=central renders dist/master + dist/node: the master writes the
# one zone's NB over TCP.
source "$(dirname "$0")/common.sh"
need "$OCI_BIN" kubectl

log "external container $E2E_EXTERNAL_CONTAINER on network $KIND_NETWORK"
"$OCI_BIN" rm -f "$E2E_EXTERNAL_CONTAINER" >/dev/null 2>&1 || true
"$OCI_BIN" run -d --name "$E2E_EXTERNAL_CONTAINER" --network "$KIND_NETWORK" "$E2E_ECHO_IMAGE" serve -port 7777 >/dev/null

# The cluster's networks, as ovn-kubernetes was given them (a host prefix
# suffix like 10.244.0.0/16/24 is dropped).
strip_host_prefix() { tr ',' '\n' | cut -d/ -f1,2 | paste -sd, -; }
cluster_subnets=$(kubectl -n ovn-kubernetes get configmap ovn-config -o jsonpath='{.data.net_cidr}' | strip_host_prefix)
service_cidrs=$(kubectl -n ovn-kubernetes get configmap ovn-config -o jsonpath='{.data.svc_cidr}' | strip_host_prefix)
[[ -n $cluster_subnets && -n $service_cidrs ]] || { echo "configmap ovn-kubernetes/ovn-config lacks net_cidr or svc_cidr" >&2; exit 1; }

check_zones

# The NB ovn-egress writes.
#   ic: each node's own, whose nb-ovsdb (in that node's ovnkube-node pod)
#       listens on $OVN_RUN_DIR_HOST/ovnnb_db.sock on the node; the agent
#       mounts that directory at /var/run/ovn, so its --nb-address is
#       dist/ic's unix:/var/run/ovn/ovnnb_db.sock.
#   central: the one zone's, whose nb-ovsdb listens on the zone controller
#       node's address, port 6641 (the master's --nb-address).
nb_agent=unix:/var/run/ovn/ovnnb_db.sock
if [[ $E2E_MODE == ic ]]; then
  missing=()
  for node in $(kubectl get nodes -o jsonpath='{.items[*].metadata.name}'); do
    # kind names each node's container after the node.
    "$OCI_BIN" exec "$node" test -S "$OVN_RUN_DIR_HOST/ovnnb_db.sock" || missing+=("$node")
  done
  if ((${#missing[@]} > 0)); then
    echo "no NB socket $OVN_RUN_DIR_HOST/ovnnb_db.sock on node(s) ${missing[*]}: set OVN_RUN_DIR_HOST to the host directory ovn-kubernetes' nb-ovsdb mounts at /var/run/ovn" >&2
    exit 1
  fi
  log "NB per node: $OVN_RUN_DIR_HOST/ovnnb_db.sock on each node ($nb_agent in the agent); cluster subnets $cluster_subnets; service CIDRs $service_cidrs"
else
  zc=$(kubectl get nodes -l node-role.kubernetes.io/zone-controller -o jsonpath='{.items[*].metadata.name}')
  [[ -n $zc && $zc != *" "* ]] || { echo "want exactly one zone-controller node, have '$zc'" >&2; exit 1; }
  ips=$(kubectl get node "$zc" -o jsonpath='{range .status.addresses[?(@.type=="InternalIP")]}{.address}{"\n"}{end}')
  ip=$(grep -v : <<<"$ips" | head -1 || true)
  nb="tcp:$ip:6641"
  if [[ -z $ip ]]; then
    ip=$(head -1 <<<"$ips")
    nb="tcp:[$ip]:6641"
  fi
  log "NB $nb (zone controller $zc); cluster subnets $cluster_subnets; service CIDRs $service_cidrs"
fi

out=$WORK_DIR/deploy
rm -rf "$out"
mkdir -p "$out"
cp -r "$REPO_ROOT/dist/namespace.yaml" "$REPO_ROOT/dist/crds" "$REPO_ROOT/dist/master" "$REPO_ROOT/dist/node" "$REPO_ROOT/dist/ic" "$out/"
image_name=${OVN_EGRESS_IMAGE%:*}
image_tag=${OVN_EGRESS_IMAGE##*:}

# The patches replace each container's args whole (a strategic merge patch
# replaces a list of strings): every flag the e2e run needs is here.
if [[ $E2E_MODE == ic ]]; then
  master_manifest=ic/master-deployment.yaml
  agent_manifest=ic/node-daemonset.yaml
  master_patch=$(cat <<YAML
          containers:
          - name: master
            imagePullPolicy: Never
            args:
            - master
            - --mode=ic
            - --cluster-subnets=$cluster_subnets
            - --service-cidrs=$service_cidrs
            - --join-subnets=$JOIN_SUBNETS
            - --health-check-mode=connect
            - --log-level=debug
YAML
  )
  agent_patch=$(cat <<YAML
          containers:
          - name: node
            imagePullPolicy: Never
            args:
            - node
            - --node-name=\$(NODE_NAME)
            - --cluster-subnets=$cluster_subnets
            - --rt-tables=/host/etc/iproute2/rt_tables
            - --health-listen
            - --health-check-port=9
            - --zone=\$(NODE_NAME)
            - --nb-address=$nb_agent
            - --join-subnets=$JOIN_SUBNETS
            - --service-cidrs=$service_cidrs
            - --snat-backend=host
            - --log-level=debug
          volumes:
          - name: ovn-run
            hostPath:
              path: $OVN_RUN_DIR_HOST
              type: Directory
YAML
  )
else
  master_manifest=master/deployment.yaml
  agent_manifest=node/daemonset.yaml
  master_patch=$(cat <<YAML
          containers:
          - name: master
            imagePullPolicy: Never
            args:
            - master
            - --nb-address=\$(OVN_NB_ADDRESS)
            - --cluster-subnets=$cluster_subnets
            - --service-cidrs=$service_cidrs
            - --join-subnets=$JOIN_SUBNETS
            - --health-check-mode=connect
            - --log-level=debug
            - --snat-backend=host
            env:
            - name: OVN_NB_ADDRESS
              value: "$nb"
YAML
  )
  agent_patch=$(cat <<YAML
          containers:
          - name: node
            imagePullPolicy: Never
            args:
            - node
            - --node-name=\$(NODE_NAME)
            - --cluster-subnets=$cluster_subnets
            - --rt-tables=/host/etc/iproute2/rt_tables
            - --health-listen
            - --health-check-port=9
            - --log-level=debug
YAML
  )
fi

cat >"$out/kustomization.yaml" <<YAML
resources:
- namespace.yaml
- crds/k8s.ovn.org_egressservices.yaml
- master/rbac.yaml
- $master_manifest
- node/rbac.yaml
- $agent_manifest
images:
- name: ghcr.io/ovn-egress/ovn-egress
  newName: $image_name
  newTag: $image_tag
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: ovn-egress-master
      namespace: ovn-egress
    spec:
      template:
        spec:
$master_patch
- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata:
      name: ovn-egress-node
      namespace: ovn-egress
    spec:
      template:
        spec:
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                - matchExpressions:
                  - key: ovn-egress.io/e2e-agent-off
                    operator: DoesNotExist
$agent_patch
YAML
log "deploy dist/ for E2E_MODE=$E2E_MODE: $master_manifest, $agent_manifest (rendered in $out)"
kubectl kustomize "$out" >"$out/rendered.yaml"
kubectl apply -f "$out/rendered.yaml"
kubectl wait --for=condition=Established crd/egressservices.k8s.ovn.org --timeout=2m
kubectl -n ovn-egress rollout status deployment/ovn-egress-master --timeout=5m
kubectl -n ovn-egress rollout status daemonset/ovn-egress-node --timeout=5m
log "ovn-egress is up"
