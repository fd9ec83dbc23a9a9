// Command image writes the ovn-egress image archive (an OCI layout in a
// tar) from a Debian root tar and the static binary; hack/image.sh runs it
// (make image). It prints the manifest's digest.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ovn-egress/ovn-egress/internal/ociimage"
)

func main() {
	base := flag.String("base", "", "the Debian root, a tar (mmdebstrap)")
	baseDoc := flag.String("base-doc", "", "what made the base (the image history)")
	binary := flag.String("binary", "", "the static ovn-egress binary")
	version := flag.String("version", "dev", "the version (the image's ref name and version label)")
	commit := flag.String("commit", "", "the source commit (label)")
	source := flag.String("source", "https://github.com/ovn-egress/ovn-egress", "the source repository (label)")
	arch := flag.String("arch", "amd64", "the image's architecture (GOARCH naming)")
	epoch := flag.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "seconds since 1970: every time in the image (SOURCE_DATE_EPOCH)")
	out := flag.String("out", "", "the image archive to write")
	flag.Parse()
	if err := run(*base, *baseDoc, *binary, *version, *commit, *source, *arch, *epoch, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(base, baseDoc, binary, version, commit, source, arch, epochS, out string) error {
	if base == "" || binary == "" || out == "" || epochS == "" {
		return fmt.Errorf("-base, -binary, -out and -epoch (or SOURCE_DATE_EPOCH) are required")
	}
	sec, err := strconv.ParseInt(epochS, 10, 64)
	if err != nil {
		return fmt.Errorf("epoch %q: %w", epochS, err)
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	entrypoint, cmd, err := dockerfileExec("dist/Dockerfile")
	if err != nil {
		return err
	}
	epoch := time.Unix(sec, 0).UTC()
	spec := ociimage.Spec{BaseTar: base, BaseDoc: baseDoc, FilesDoc: "ovn-egress " + version + " (go build, CGO_ENABLED=0)",
		Files: []ociimage.File{{Path: "usr/local/bin/ovn-egress", Mode: 0o755, Data: bin}},
		Epoch: epoch, Arch: arch, Entrypoint: entrypoint, Cmd: cmd,
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "ovn-egress",
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": commit,
			"org.opencontainers.image.source":   source,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  epoch.Format(time.RFC3339),
		},
		Ref: version}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	digest, err := ociimage.Build(f, spec)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

// dockerfileExec reads ENTRYPOINT and CMD (JSON form) from the Dockerfile:
// one description of how the image runs, for both builds.
func dockerfileExec(path string) (entrypoint, cmd []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		for _, k := range []struct {
			prefix string
			into   *[]string
		}{{"ENTRYPOINT ", &entrypoint}, {"CMD ", &cmd}} {
			if rest, ok := strings.CutPrefix(line, k.prefix); ok {
				if *k.into, err = jsonList(rest); err != nil {
					return nil, nil, fmt.Errorf("%s: %s: %w", path, line, err)
				}
			}
		}
	}
	if len(entrypoint) == 0 {
		return nil, nil, fmt.Errorf("%s: no ENTRYPOINT", path)
	}
	return entrypoint, cmd, s.Err()
}

func jsonList(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("want the JSON form")
	}
	var out []string
	for _, part := range strings.Split(strings.Trim(s, "[]"), ",") {
		v, err := strconv.Unquote(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
