#!/usr/bin/env bash
# Fails when generated code is out of date, Go code is not gofmt'ed, go vet
# complains, or the code calls a known vulnerability of a required module. Generation runs in a scratch copy of the tree, so the working
# tree is never modified.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
fail=0

mapfile -t gofiles < <(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')
unformatted=$(gofmt -l "${gofiles[@]}")
if [[ -n $unformatted ]]; then
  echo "gofmt needed on:"; echo "$unformatted"; fail=1
fi

go vet ./...
# The e2e files behind build tags (make demo, make chaos) are vetted too:
# nothing else compiles them before those targets run.
go vet -tags demo ./test/e2e/local/
go vet -tags chaos ./test/e2e/local/
# The nested module with Go code (test/e2e/kind) has its own go.mod.
(cd test/e2e/kind && go vet ./...)

# The workflows (actionlint, pinned in hack/tools; it runs shellcheck on
# their run: scripts) and every shell script (shellcheck, Debian's).
TOOLS=${TOOLS_DIR:-$ROOT/bin/tools}
(cd "$ROOT/hack/tools" && go build -o "$TOOLS/" github.com/rhysd/actionlint/cmd/actionlint)
command -v shellcheck >/dev/null || { echo "verify: shellcheck missing (hack/install-deps.sh installs it)"; exit 1; }
if ! "$TOOLS/actionlint" .github/workflows/*.yml; then fail=1; fi
mapfile -t scripts < <(git ls-files '*.sh' .ci/run 2>/dev/null)
if ! shellcheck -x -S warning "${scripts[@]}"; then fail=1; fi

# Known vulnerabilities the code calls (offline database: hack/vulncheck.sh).
(cd hack/vulncheck && go vet ./... && go test -count=1 ./...)
if ! "$ROOT/hack/vulncheck.sh"; then fail=1; fi

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
tar -C "$ROOT" --exclude=./bin --exclude=./.git -cf - . | tar -C "$SCRATCH" -xf -
TOOLS_DIR=$ROOT/bin/tools "$SCRATCH/hack/update-codegen.sh" >/dev/null
for d in pkg/nbdb pkg/nbdbext pkg/sbdb pkg/k8s/client pkg/apis dist/crds dist/master dist/node dist/ic dist/monitoring dist/helm/ovn-egress/files/crds; do
  if ! diff -r "$ROOT/$d" "$SCRATCH/$d" >/dev/null; then
    echo "generated code in $d is out of date; run 'make generate':"
    diff -r "$ROOT/$d" "$SCRATCH/$d" | head -20
    fail=1
  fi
done

if (( fail )); then exit 1; fi
echo "verify: ok"
