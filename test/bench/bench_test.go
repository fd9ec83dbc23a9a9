package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBenchRuns runs the benchmark program's main path at a tiny size and
// checks only that every scenario ran and produced numbers: timings are
// never asserted (they belong to `make bench`, on a quiet machine).
func TestBenchRuns(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-services", "12", "-endpoints", "2", "-nodes", "3", "-churn", "3", "-peer-churn", "3",
		"-sustain", "1s", "-out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	for _, name := range allScenarios() {
		files, _ := filepath.Glob(filepath.Join(out, "*-"+name+".json"))
		if len(files) != 1 {
			t.Errorf("scenario %s: %d result files, want 1", name, len(files))
			continue
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", files[0], err)
		}
		if r.Error != "" || len(r.Metrics) == 0 {
			t.Errorf("scenario %s: error %q, %d metrics", name, r.Error, len(r.Metrics))
		}
		if r.Machine.Cores == 0 || r.Machine.OVN == "" {
			t.Errorf("scenario %s: machine facts missing: %+v", name, r.Machine)
		}
		for _, c := range r.Checks {
			if c.Value == -1 {
				t.Errorf("scenario %s: check %q has no number", name, c.Name)
			}
		}
	}
}
