#!/usr/bin/env bash
# Fails when generated code is out of date, Go code is not gofmt'ed, or go vet
# complains. Generation runs in a scratch copy of the tree, so the working
# tree is never modified.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
fail=0

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*'))
if [[ -n $unformatted ]]; then
  echo "gofmt needed on:"; echo "$unformatted"; fail=1
fi

go vet ./...
# The e2e files behind build tags (make demo, make chaos) are vetted too:
# nothing else compiles them before those targets run.
go vet -tags demo ./test/e2e/local/
go vet -tags chaos ./test/e2e/local/
# Nested modules have their own go.mod; vet the ones with Go code.
for m in test/e2e/kind; do
  if [[ -f $m/go.mod ]]; then (cd "$m" && go vet ./...); fi
done

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
tar -C "$ROOT" --exclude=./bin --exclude=./.git -cf - . | tar -C "$SCRATCH" -xf -
TOOLS_DIR=$ROOT/bin/tools "$SCRATCH/hack/update-codegen.sh" >/dev/null
for d in pkg/nbdb pkg/nbdbext pkg/sbdb pkg/k8s/client pkg/k8s/apis dist/crds dist/master dist/node dist/ic dist/helm/ovn-egress/crds; do
  if ! diff -r "$ROOT/$d" "$SCRATCH/$d" >/dev/null; then
    echo "generated code in $d is out of date; run 'make generate':"
    diff -r "$ROOT/$d" "$SCRATCH/$d" | head -20
    fail=1
  fi
done

if (( fail )); then exit 1; fi
echo "verify: ok"
