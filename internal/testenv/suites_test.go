package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOVNSuitesListed: every package whose tests start OVN is in the
// Makefile's OVN_TEST_PKGS, so `make test-ovn25` runs it on OVN 25.03 too.
func TestOVNSuitesListed(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^OVN_TEST_PKGS := (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no OVN_TEST_PKGS in the Makefile")
	}
	listed := strings.Fields(string(m[1]))
	uses := regexp.MustCompile(`testenv\.(NewOVN|StartOVN|NewDataplane|NewNBCluster)\(`)
	var missing []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil || !uses.Match(b) {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		if pkg := "./" + filepath.ToSlash(rel) + "/"; !slices.Contains(listed, pkg) && !slices.Contains(missing, pkg) {
			missing = append(missing, pkg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(listed, "./internal/testenv/") {
		missing = append(missing, "./internal/testenv/")
	}
	if len(missing) > 0 {
		t.Errorf("tests of %s start OVN but are not in the Makefile's OVN_TEST_PKGS", strings.Join(missing, ", "))
	}
}
