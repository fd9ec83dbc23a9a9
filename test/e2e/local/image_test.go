package local

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestImageIsTheDockerfiles: the image `make image` builds (and this suite
// runs) holds what dist/Dockerfile describes for GitHub's builders: the
// same entrypoint and default command, every package of
// dist/image/packages installed (dpkg's status), the binary where the
// Dockerfile copies it, and it says which version and commit it is built
// from, as its labels do.
func TestImageIsTheDockerfiles(t *testing.T) {
	df, err := os.ReadFile("../../../dist/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(df)
	cfg := img.Image.Config.Config
	for _, want := range []string{
		`ENTRYPOINT ["` + strings.Join(cfg.Entrypoint, `", "`) + `"]`,
		`CMD ["` + strings.Join(cfg.Cmd, `", "`) + `"]`,
		"COPY dist/image/packages /tmp/packages",
		"COPY --from=build /out/ovn-egress " + cfg.Entrypoint[0],
	} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("dist/Dockerfile lacks %q: the two builds disagree", want)
		}
	}
	pkgs := readPackages(t, "../../../dist/image/packages")
	status, err := os.ReadFile(filepath.Join(img.Root, "var", "lib", "dpkg", "status"))
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string]bool{}
	for _, stanza := range strings.Split(string(status), "\n\n") {
		var name string
		ok := false
		for _, line := range strings.Split(stanza, "\n") {
			if v, found := strings.CutPrefix(line, "Package: "); found {
				name = v
			}
			if line == "Status: install ok installed" {
				ok = true
			}
		}
		installed[name] = ok
	}
	for _, p := range pkgs {
		if !installed[p] {
			t.Errorf("package %s of dist/image/packages is not installed in the image", p)
		}
	}
	files, err := img.Image.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{strings.TrimPrefix(cfg.Entrypoint[0], "/"), "usr/sbin/nft", "usr/bin/ip"} {
		if !slices.Contains(files, f) && !slices.Contains(files, strings.Replace(f, "usr/bin/", "bin/", 1)) {
			t.Errorf("the image has no %s", f)
		}
	}
	out, err := exec.Command(img.Binary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("the image's binary: %v: %s", err, out)
	}
	labels := cfg.Labels
	if v := labels["org.opencontainers.image.version"]; v == "" || !strings.Contains(string(out), "ovn-egress "+v+" ") || img.Image.Ref != v {
		t.Errorf("version: label %q, ref %q, the binary says %q", v, img.Image.Ref, out)
	}
	if c := labels["org.opencontainers.image.revision"]; len(c) != 40 || !strings.Contains(string(out), "commit "+c) {
		t.Errorf("commit: label %q, the binary says %q", c, out)
	}
}

func readPackages(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if l := strings.TrimSpace(s.Text()); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no package", path)
	}
	return out
}
