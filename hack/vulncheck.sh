#!/usr/bin/env bash
# Known vulnerabilities the code calls: govulncheck (pinned in
# hack/vulncheck) against the Go vulnerability database as the module
# golang.org/x/vulndb holds it at VULNDB_VERSION (its data/osv, read
# offline through the Go module proxy: the machines that build ovn-egress
# reach no other source). Bump VULNDB_VERSION to take newer entries. Fails
# when a required module's vulnerability is called (hack/vulncheck/main.go);
# the standard library's are warnings about the toolchain.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VULNDB_VERSION=${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}
TOOLS=${TOOLS_DIR:-$ROOT/bin/tools}
mkdir -p "$TOOLS"
cd "$ROOT/hack/vulncheck"
go build -o "$TOOLS/govulncheck" golang.org/x/vuln/cmd/govulncheck
go build -o "$TOOLS/vulnreport" .
db=$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ ! -d $db/data/osv ]]; then
  echo "vulncheck: golang.org/x/vulndb@$VULNDB_VERSION has no data/osv" >&2
  exit 1
fi
echo "vulncheck: database golang.org/x/vulndb@$VULNDB_VERSION ($(find "$db/data/osv" -name '*.json' | wc -l) entries)"
cd "$ROOT"
"$TOOLS/govulncheck" -db "file://$db/data/osv" -format json ./... | "$TOOLS/vulnreport"
