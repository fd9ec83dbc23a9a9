#!/usr/bin/env bash
# Builds the ovn-egress image without a registry or a container engine
# (make image): a Debian root made by mmdebstrap from Debian's packages
# (dist/image/packages, the same list dist/Dockerfile installs), the static
# binary on top, written as an OCI image archive (bin/ovn-egress-image.tar;
# `skopeo copy oci-archive:bin/ovn-egress-image.tar docker://...` pushes it).
# Reproducible: every time in the image is SOURCE_DATE_EPOCH (the commit's
# time by default), so the same commit gives the same digest, printed last
# and written to bin/ovn-egress-image.digest. The Debian root is kept per
# suite, architecture and package list under bin/image/ (about 2 minutes to
# make, once); IMAGE_REFRESH=1 makes it again from the mirror.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH=$PATH:/usr/sbin:/sbin
OUT=$ROOT/bin/image
SUITE=${IMAGE_SUITE:-bookworm}
ARCH=${ARCH:-$(go env GOARCH)}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
mapfile -t PKGS < <(grep -v -e '^#' -e '^$' dist/image/packages)
mkdir -p "$OUT"
# One build at a time: the test packages that run the image (test/e2e/local,
# test/helm) build it from their TestMain, side by side; two builds would
# share the root's, the binary's and the archive's temporary files.
exec 9>"$OUT/.lock"
flock 9

if ! command -v mmdebstrap >/dev/null; then
  SUDO=; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  echo "image: installing mmdebstrap"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

# The first Debian mirror of this machine's apt sources.
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk 'tolower($1)=="uris:" {print $2; exit}' "$f"
  done
  if [[ -f /etc/apt/sources.list ]]; then
    awk '$1=="deb" {print ($2 ~ /^\[/ ? $3 : $2); exit}' /etc/apt/sources.list
  fi
}
MIRROR=${IMAGE_MIRROR:-$(mirror | grep -m1 -E '^https?://' || echo http://deb.debian.org/debian)}

key=$(printf '%s\n' "$SUITE" "$ARCH" "${PKGS[@]}" | sha256sum | cut -c1-12)
BASE=$OUT/base-$SUITE-$ARCH-$key.tar
if [[ ! -s $BASE || -n ${IMAGE_REFRESH:-} ]]; then
  echo "image: Debian $SUITE root for $ARCH with ${PKGS[*]} from $MIRROR (about 2 minutes)"
  # The root is made with a fixed epoch (the image clamps every time to
  # SOURCE_DATE_EPOCH anyway), so it serves every commit.
  SOURCE_DATE_EPOCH=0 mmdebstrap --quiet --format=tar --variant=essential --architectures="$ARCH" \
    --include="$(IFS=,; echo "${PKGS[*]}")" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    "$SUITE" "$BASE.tmp" "$MIRROR"
  mv "$BASE.tmp" "$BASE"
fi

CGO_ENABLED=0 GOARCH=$ARCH go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" \
  -o "$OUT/ovn-egress-$ARCH" ./cmd/ovn-egress
digest=$(go run ./hack/image -base "$BASE" -base-doc "mmdebstrap --variant=essential $SUITE: ${PKGS[*]}" \
  -binary "$OUT/ovn-egress-$ARCH" -version "$VERSION" -commit "$COMMIT" -arch "$ARCH" -out "$ROOT/bin/ovn-egress-image.tar")
echo "$digest" > "$ROOT/bin/ovn-egress-image.digest"
echo "image: bin/ovn-egress-image.tar $VERSION ($ARCH) $digest"
