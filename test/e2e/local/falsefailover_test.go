//go:build chaos

package local

import (
	"flag"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovn-egress/ovn-egress/pkg/apis/egressservice/v1"
	"github.com/ovn-egress/ovn-egress/pkg/ipfamily"
)

var (
	starveDuration = flag.Duration("starve.duration", 10*time.Minute, "how long TestNoFalseFailover keeps the machine CPU-starved")
	starveHogs     = flag.Int("starve.hogs", 4, "busy loops TestNoFalseFailover runs beside the cluster (2 per core on this 2-core machine)")
)

// TestNoFalseFailover: the health checks at their defaults do not drain a
// live host while the machine is CPU-starved — busy loops beside the
// master, the agents, OVN and the userspace datapath, for -starve.duration
// — and nothing else moves a service: status.host of every EgressService
// stays where it was, and the master counts no host change. It reports
// the probes that returned late (the master was not scheduled in time)
// and how long the probes took.
func TestNoFalseFailover(t *testing.T) {
	c := newCluster(t, options{backend: "host", families: []ipfamily.Family{ipfamily.V4}})
	for _, n := range []string{"node2", "node3"} {
		c.label(n, "egress", "a")
	}
	hosts := map[string]string{}
	for i, name := range []string{"web", "api", "db"} {
		p := c.addPod(name+"1", "node1", 5+i)
		c.service(name, i, p)
		c.egressService(name, egressv1.EgressServiceSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"egress": "a"}}})
		hosts[name] = c.host(name, func(h string) bool { return h != "" })
	}
	stop := c.keepAsking(c.pods["web1"])
	defer stop()
	var hogs []*exec.Cmd
	for range *starveHogs {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, cmd)
	}
	defer func() {
		for _, h := range hogs {
			_ = h.Process.Kill()
			_ = h.Wait()
		}
	}()
	t.Logf("%d busy loops for %v", len(hogs), *starveDuration)
	end := time.Now().Add(*starveDuration)
	moved := 0
	for time.Now().Before(end) {
		time.Sleep(time.Second)
		for name, h := range hosts {
			if now := c.currentHost(name); now != h {
				moved++
				t.Errorf("%s %s moved from %s to %q while every node was alive", time.Now().Format("15:04:05.000"), name, h, now)
				hosts[name] = now
			}
		}
	}
	for _, h := range hogs {
		_ = h.Process.Kill()
	}
	m, err := c.masterMetrics(c.leaderIndex())
	if err != nil {
		t.Fatal(err)
	}
	changes := m.Sum("ovn_egress_host_changes_total")
	late, _ := m.Get("ovn_egress_health_probes_late_total")
	failed := m.Sum("ovn_egress_health_probe_failures_total")
	probes, _ := m.Get("ovn_egress_health_probe_duration_seconds_count")
	sum, _ := m.Get("ovn_egress_health_probe_duration_seconds_sum")
	var slow []string
	for _, le := range []string{"0.064", "0.128", "0.256", "0.512", "1.024"} {
		if v, ok := m.Get("ovn_egress_health_probe_duration_seconds_bucket", "le", le); ok {
			slow = append(slow, fmt.Sprintf("≤%ss: %.0f", le, v))
		}
	}
	t.Logf("under %d busy loops for %v: %d status.host moves, %v host changes, %v probes (mean %.1f ms; %s), %v failed, %v late (verdict kept)",
		len(hogs), *starveDuration, moved, changes, probes, 1000*sum/max(probes, 1), strings.Join(slow, ", "), failed, late)
	if changes != 0 {
		t.Errorf("the master counted %v host changes (ovn_egress_host_changes_total), want 0", changes)
	}
}
