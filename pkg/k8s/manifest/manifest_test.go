package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadDirectoriesDocumentsAndLists(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", `# leading comment
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec: {type: LoadBalancer}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: k8s.ovn.org/v1
kind: EgressService
metadata: {name: web, namespace: ns}
status: {host: node1}
`)
	write(t, dir, "sub/b.json", `{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"v1","kind":"Node","metadata":{"name":"node1"}},
 {"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-1","namespace":"ns","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","endpoints":[{"addresses":["10.244.1.5"]}]}]}`)
	write(t, dir, "notes.txt", "not a manifest")
	res, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Services) != 1 || len(res.EgressServices) != 1 || len(res.Nodes) != 1 || len(res.EndpointSlices) != 1 {
		t.Fatalf("got %d services, %d egressservices, %d nodes, %d slices",
			len(res.Services), len(res.EgressServices), len(res.Nodes), len(res.EndpointSlices))
	}
	if res.EgressServices[0].Status.Host != "node1" {
		t.Errorf("status not read: %+v", res.EgressServices[0].Status)
	}
	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], "a.yaml:8: ConfigMap") {
		t.Errorf("skipped = %v", res.Skipped)
	}
}

func TestReadErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, content, want string
	}{
		{"syntax.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  type: [oops\n", "syntax.yaml:6:"},
		{"second.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {typo: 1}\n", "second.yaml:5:"},
		{"unknown-field.yaml", "apiVersion: k8s.ovn.org/v1\nkind: EgressService\nmetadata: {name: x}\nspec: {sourceIP: x}\n", `unknown field "spec.sourceIP"`},
	} {
		_, err := Read(write(t, dir, c.name, c.content))
		var me *Error
		if !errors.As(err, &me) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	if _, err := Read(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
