//go:build tools

// govulncheck is pinned here (hack/vulncheck.sh builds it).
package main

import _ "golang.org/x/vuln/cmd/govulncheck"
