package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/translate"
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
		"-sustain", "1s", "-health-window", "1s", "-eip-pods", "24", "-eips", "4", "-out", out}, &stdout, &stderr)
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

// BenchmarkDrainFed is the translation half of a failover with nothing else
// on the machine: the master (informers fed directly) is loaded with the
// default size, then every service of one host moves to the others at once
// (their status.host rewritten, round-robin); one op is the time until NB
// has every moved endpoint in its new host's set and the old set is gone.
// Run with -benchtime=Nx; -cpuprofile shows where a sync's time goes.
func BenchmarkDrainFed(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	w, err := newWorld(defaultSize)
	if err != nil {
		b.Fatal(err)
	}
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("BENCH_DEBUG") != "" {
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.DebugLevel)
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: stamp})
	}
	be := &bench{w: w, log: l.WithField("component", "bench"), out: io.Discard, tmp: b.TempDir()}
	ld, err := be.loadFake(ctx, translate.BackendHost, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer ld.stop()
	sets, err := w.hostSets(ld.d, translate.BackendHost)
	if err != nil {
		b.Fatal(err)
	}
	objs := w.objects(true)
	in := translate.InputFromObjects(ld.cfg, objs.translateObjects())
	esList := ld.st.egInf.K8s().V1().EgressServices().Lister()
	dead := map[string]bool{}
	before := ld.st.sync.Stats()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		victim := w.nodeName(i % w.size.Nodes)
		dead[victim] = true
		var alive []string
		for n := 0; n < w.size.Nodes; n++ {
			if !dead[w.nodeName(n)] {
				alive = append(alive, w.nodeName(n))
			}
		}
		if len(alive) == 0 {
			b.Fatal("no host left")
		}
		all, _ := esList.List(labels.Everything())
		var moved []*egressv1.EgressService
		var ips []string
		for _, es := range all {
			if es.Status.Host != victim {
				continue
			}
			c := es.DeepCopy()
			c.Status.Host = alive[len(moved)%len(alive)]
			ld.rv++
			c.ResourceVersion = fmt.Sprintf("bench-%d", ld.rv)
			moved = append(moved, c)
			k := translate.EgressServiceKey(es)
			for _, e := range translate.ServiceEndpoints(in.Services[k], in.EndpointSlices[k], in.Config.ClusterSubnets) {
				ips = append(ips, e.IP.String())
			}
		}
		nbCond, _ := repointed(ld.env, sets, victim, ips, false)
		ld.env.settle()
		b.StartTimer()
		for j, c := range moved {
			if _, err := ld.egress.K8sV1().EgressServices(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			// The fake watch holds 100 events: let the informer catch up.
			for j%50 == 49 {
				got, err := esList.EgressServices(c.Namespace).Get(c.Name)
				if err == nil && got.ResourceVersion == c.ResourceVersion {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		if _, err := ld.env.nb.wait(ctx, "rows repointed in NB", nbCond); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	ld.env.settle()
	after := ld.st.sync.Stats()
	b.ReportMetric(float64(after.Syncs-before.Syncs)/float64(b.N), "syncs/op")
	b.ReportMetric(float64(after.Transactions-before.Transactions)/float64(b.N), "txns/op")
}
