#!/usr/bin/env bash
# Prepares a newer OVN than Debian 12 ships — OVN 25.03 with Open vSwitch 3.5,
# Debian 13's packages — in a root outside the repository, once per machine,
# and writes one wrapper per binary that runs it with the root's own dynamic
# loader and libraries (no chroot, no bind mounts: every path means the same
# for the wrapped binary as for the test that starts it).
#
#   hack/ovn-root.sh            # prepare (if missing) and print the wrapper dir
#   hack/ovn-root.sh --check    # exit 1 unless prepared
#
# OVN_EGRESS_CACHE (default /var/tmp/ovn-egress) holds ovn-25.03/{root,bin}.
# The packages come from the mirror this machine's own apt sources name.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
VERSION=25.03
SUITE=trixie
CACHE=${OVN_EGRESS_CACHE:-/var/tmp/ovn-egress}
DIR=$CACHE/ovn-$VERSION
ROOT=$DIR/root
BIN=$DIR/bin
# The binaries testenv runs: OVN's and Open vSwitch's daemons and tools.
TOOLS=(ovsdb-server ovsdb-tool ovsdb-client ovn-northd ovn-nbctl ovn-sbctl ovn-appctl ovn-trace
  ovs-appctl ovs-vswitchd ovs-vsctl ovs-ofctl ovn-controller)

# Bumped whenever the wrappers change, so that a prepared machine rewrites them.
FORMAT=2
ready() { [[ $(cat "$DIR/ready" 2>/dev/null) == "$FORMAT" && -x $BIN/ovn-nbctl ]]; }

if [[ ${1:-} == --check ]]; then
  ready
  exit
fi
if ready; then
  echo "$BIN"
  exit 0
fi

SUDO=
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi

# The first Debian mirror of this machine's apt sources (deb822 or one-line).
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk 'tolower($1)=="uris:" {u=$2} tolower($1)=="suites:" {for (i=2;i<=NF;i++) if ($i ~ /^bookworm$|^trixie$/) s=1}
         /^$/ {if (u && s) {print u; exit}; u=""; s=0} END {if (u && s) print u}' "$f"
  done
  if [[ -f /etc/apt/sources.list ]]; then
    awk '$1=="deb" && ($3=="bookworm" || $3=="trixie") {print ($2 ~ /^\[/ ? $3 : $2); exit}' /etc/apt/sources.list
  fi
}
start=$(date +%s)
if [[ ! -f $ROOT/.ovn-egress-complete ]]; then
MIRROR=$(mirror | head -n1)
if [[ -z $MIRROR ]]; then
  echo "ovn-root: no Debian mirror found in /etc/apt/sources.list{,.d}" >&2
  exit 1
fi

if ! command -v debootstrap >/dev/null; then
  echo "ovn-root: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# Never remove a root something is mounted in (an older, chroot-based setup
# bind-mounted host folders there: rm -rf would delete through them).
if grep -q " $ROOT/" /proc/mounts; then
  echo "ovn-root: $ROOT has mounts; unmount them first:" >&2
  grep " $ROOT/" /proc/mounts >&2
  exit 1
fi
echo "ovn-root: preparing OVN $VERSION ($SUITE) in $ROOT from $MIRROR (about 2 minutes, ~360 MB, once)"
$SUDO rm -rf "$ROOT.tmp"
$SUDO mkdir -p "$DIR"
$SUDO debootstrap --variant=minbase --include=ovn-central,ovn-host,openvswitch-switch \
  "$SUITE" "$ROOT.tmp" "$MIRROR" > "$DIR/debootstrap.log" 2>&1 || {
  echo "ovn-root: debootstrap failed; the end of $DIR/debootstrap.log:" >&2
  tail -n 20 "$DIR/debootstrap.log" >&2
  exit 1
}
$SUDO touch "$ROOT.tmp/.ovn-egress-complete"
$SUDO rm -rf "$ROOT"
$SUDO mv "$ROOT.tmp" "$ROOT"
fi

# in_root PATH: the real file PATH names inside the root. The root's own
# symlinks may be absolute (ovs-vswitchd -> /etc/alternatives/...): followed
# from outside they would lead to the host's files.
in_root() {
  local p=$1 t i
  for ((i = 0; i < 40; i++)); do
    [[ -L $ROOT$p ]] || break
    t=$(readlink "$ROOT$p")
    if [[ $t == /* ]]; then p=$t; else p=$(dirname "$p")/$t; fi
  done
  echo "$ROOT$p"
}

# The loader and library folder as real paths inside the root.
LOADER=$(in_root /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
LIBS=$ROOT/usr/lib/x86_64-linux-gnu
if [[ ! -f $LOADER ]]; then
  echo "ovn-root: no dynamic loader at $LOADER" >&2
  exit 1
fi
$SUDO mkdir -p "$BIN"
for t in "${TOOLS[@]}"; do
  p=
  for d in /usr/sbin /usr/bin; do
    if [[ -e $ROOT$d/$t || -L $ROOT$d/$t ]]; then p=$(in_root "$d/$t"); break; fi
  done
  if [[ -n $p && ! -f $p ]]; then
    echo "ovn-root: $t resolves to $p, which is not a file" >&2
    exit 1
  fi
  if [[ -z $p ]]; then
    echo "ovn-root: $t missing in the root" >&2
    exit 1
  fi
  # OVS_PKGDATADIR / OVN_PKGDATADIR: the root's data files (schemas, ...)
  # for anything the binary looks up by its compiled-in default.
  $SUDO tee "$BIN/$t" >/dev/null <<WRAP
#!/bin/sh
# OVN $VERSION's $t from $ROOT (written by hack/ovn-root.sh).
OVS_PKGDATADIR=\${OVS_PKGDATADIR:-$ROOT/usr/share/openvswitch} OVN_PKGDATADIR=\${OVN_PKGDATADIR:-$ROOT/usr/share/ovn} \\
  exec "$LOADER" --library-path "$LIBS" "$p" "\$@"
WRAP
  $SUDO chmod 755 "$BIN/$t"
done
# Every wrapper must run the root's binary (OVN 25.03, Open vSwitch 3.5).
for t in "${TOOLS[@]}"; do
  v=$("$BIN/$t" --version 2>&1 | head -n1)
  case $t in
    ovn-*) want=" $VERSION" ;;
    *) want=" 3.5" ;;
  esac
  if [[ $v != *"$want"* ]]; then
    echo "ovn-root: the wrapped $t is not from the root: $v" >&2
    exit 1
  fi
done
echo "$FORMAT" | $SUDO tee "$DIR/ready" >/dev/null
echo "ovn-root: ready in $(( $(date +%s) - start ))s, $(du -sh "$ROOT" | cut -f1); wrappers in $BIN" >&2
echo "$BIN"
