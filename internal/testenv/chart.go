package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// ChartDir is the product's Helm chart, from this package's directory.
func ChartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "dist", "helm", "ovn-egress")
}

// Rendered are the pod templates of the chart rendered with a test's
// values, as `helm template` writes them: what a kubelet would run.
type Rendered struct {
	Master corev1.PodSpec // the master Deployment's
	Node   corev1.PodSpec // the node agent DaemonSet's
	// Manifests is the whole rendering (every object, YAML).
	Manifests string
}

// RenderChart runs `helm template` of the chart with values (as a values
// file: nested maps, as values.yaml has them) and returns the master's and
// the agents' pod templates. It needs the pinned helm of `make testbin`.
func RenderChart(t testing.TB, values map[string]any) Rendered {
	t.Helper()
	helm, err := TestbinPath("helm")
	if err != nil {
		t.Fatal(err)
	}
	vb, err := json.Marshal(values) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	vf := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(vf, vb, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "ovn-egress", ChartDir(), "--namespace", "ovn-egress", "-f", vf}
	cmd := exec.Command(helm, args...)
	cmd.Env = append(cmd.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template with %s: %v: %s", vb, err, errb.String())
	}
	r := Rendered{Manifests: out.String()}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out.Bytes()), 4096)
	for {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if raw == nil {
			continue
		}
		b, err := json.Marshal(raw)
		if err == nil {
			err = json.Unmarshal(b, &obj)
		}
		if err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("the chart's Deployment %s: %v", obj.Metadata.Name, err)
			}
			r.Master = d.Spec.Template.Spec
		case "DaemonSet":
			var d appsv1.DaemonSet
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("the chart's DaemonSet %s: %v", obj.Metadata.Name, err)
			}
			r.Node = d.Spec.Template.Spec
		}
	}
	if len(r.Master.Containers) == 0 || len(r.Node.Containers) == 0 {
		t.Fatalf("helm template rendered no master Deployment or node DaemonSet")
	}
	return r
}

// Container returns the pod's container named name.
func Container(p corev1.PodSpec, name string) (corev1.Container, error) {
	for _, c := range p.Containers {
		if c.Name == name {
			return c, nil
		}
	}
	return corev1.Container{}, fmt.Errorf("no container %q", name)
}
