#!/usr/bin/env bash
# Collects what a failed run leaves behind into $ARTIFACTS: kind's node
# logs, the product's pod logs, EgressServices, Services, nodes, events,
# the policies, address sets and NAT rows of every NB ovn-egress writes
# (one per node in E2E_MODE=ic: nb-<node>.txt), the external container's log.
source "$(dirname "$0")/common.sh"
mkdir -p "$ARTIFACTS"
set +e
kind export logs --name "$KIND_CLUSTER_NAME" "$ARTIFACTS/kind" >/dev/null
kubectl get nodes -o wide --show-labels >"$ARTIFACTS/nodes.txt" 2>&1
kubectl get nodes -o yaml >"$ARTIFACTS/nodes.yaml" 2>&1
kubectl get egressservices -A -o yaml >"$ARTIFACTS/egressservices.yaml" 2>&1
kubectl get services,endpointslices -A -o wide >"$ARTIFACTS/services.txt" 2>&1
kubectl get events -A --sort-by=.lastTimestamp >"$ARTIFACTS/events.txt" 2>&1
kubectl -n metallb-system get ipaddresspools,l2advertisements -o yaml >"$ARTIFACTS/metallb.yaml" 2>&1
kubectl get pods -A -o wide >"$ARTIFACTS/pods.txt" 2>&1
for pod in $(kubectl -n ovn-egress get pods -o name 2>/dev/null); do
  kubectl -n ovn-egress logs "$pod" --all-containers >"$ARTIFACTS/ovn-egress-${pod#pod/}.log" 2>&1
  kubectl -n ovn-egress logs "$pod" --all-containers --previous >"$ARTIFACTS/ovn-egress-${pod#pod/}.previous.log" 2>/dev/null
done
# Every NB ovn-egress writes: each node's own in ic, the zone
# controller's in central (E2E_NB_POD_SELECTOR).
while read -r nbpod node; do
  [[ -n $nbpod ]] || continue
  for args in "lr-policy-list ovn_cluster_router" "list Address_Set" "find NAT external_ids:k8s.ovn.org/owner-controller=ovn-egress"; do
    echo "### ovn-nbctl $args (pod $nbpod on $node)"
    # shellcheck disable=SC2086 # $args splits into ovn-nbctl's words on purpose
    kubectl -n ovn-kubernetes exec "$nbpod" -c nb-ovsdb -- ovn-nbctl $args </dev/null
  done >"$ARTIFACTS/nb-$node.txt" 2>&1
done < <(kubectl -n ovn-kubernetes get pods -l "$E2E_NB_POD_SELECTOR" \
  -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.spec.nodeName}{"\n"}{end}' 2>/dev/null)
"$OCI_BIN" logs "$E2E_EXTERNAL_CONTAINER" >"$ARTIFACTS/external.log" 2>&1
echo "logs in $ARTIFACTS"
