#!/usr/bin/env bash
# Installs the Debian packages ovn-egress's tests and demo need, only when
# something is missing: OVN central/host, Open vSwitch, nftables and the small
# network tools the dataplane tests drive. Needs root (or sudo).
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
need=()
have() { command -v "$1" >/dev/null 2>&1; }
check() { local bin=$1 pkg=$2; have "$bin" || need+=("$pkg"); }
check ovsdb-server openvswitch-common
check ovs-vsctl openvswitch-common
check ovs-vswitchd openvswitch-switch
check ovn-northd ovn-central
check ovn-nbctl ovn-common
check ovn-trace ovn-common
check ovn-controller ovn-host
check nft nftables
check ip iproute2
check ethtool ethtool
check arping iputils-arping
check conntrack conntrack
check tcpdump tcpdump
check openssl openssl
# hack/ovn-root.sh (OVN 25.03 for make test-ovn25) builds its root with it.
check debootstrap debootstrap
# make image (hack/image.sh) builds the image's Debian root with mmdebstrap;
# the e2e and the demo run the image's containers with runc.
check mmdebstrap mmdebstrap
check runc runc
# make verify lints every shell script.
check shellcheck shellcheck
if (( ${#need[@]} == 0 )); then
  echo "install-deps: everything present"
  exit 0
fi
mapfile -t pkgs < <(printf '%s\n' "${need[@]}" | sort -u)
echo "install-deps: installing ${pkgs[*]}"
SUDO=
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
