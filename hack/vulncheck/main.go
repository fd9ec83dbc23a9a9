// Command vulnreport reads govulncheck's JSON stream (-format json) on
// stdin and prints the vulnerabilities the code calls, one line each. It
// exits 1 when one of them is in a module the build requires (fixed by
// requiring its fixed version); those of the Go standard library are
// printed as warnings, since they are fixed by the toolchain that builds
// the release, not by go.mod.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
}

type message struct {
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

func main() {
	failed, err := report(os.Stdin, os.Stdout)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "vulnreport: reading govulncheck's output:", err)
		os.Exit(2)
	case failed:
		os.Exit(1)
	}
}

// report prints the called vulnerabilities of govulncheck's JSON stream r
// to w; failed is true when one is in a required module.
func report(r io.Reader, w io.Writer) (failed bool, err error) {
	called := map[string]string{} // "module@version OSV" → the line to print
	dec := json.NewDecoder(r)
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return false, err
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue // imported or required, but not called
		}
		at := f.Trace[0]
		fixed := f.FixedVersion
		if fixed == "" {
			fixed = "no fixed version"
		}
		called[at.Module+"@"+at.Version+" "+f.OSV] = fmt.Sprintf("%s %s@%s (fixed in %s), called: %s.%s",
			f.OSV, at.Module, at.Version, fixed, at.Package, at.Function)
	}
	keys := make([]string, 0, len(called))
	for k := range called {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	warnings := 0
	for _, k := range keys {
		if strings.HasPrefix(k, "stdlib@") {
			fmt.Fprintln(w, "warning (the toolchain):", called[k])
			warnings++
			continue
		}
		fmt.Fprintln(w, "vulnerable (go.mod):", called[k])
		failed = true
	}
	if failed {
		fmt.Fprintln(w, "vulncheck: a required module has a vulnerability the code calls: require its fixed version")
		return true, nil
	}
	fmt.Fprintf(w, "vulncheck: ok (%d standard-library warnings)\n", warnings)
	return false, nil
}
