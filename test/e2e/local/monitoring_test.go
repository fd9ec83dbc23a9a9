package local

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ovn-egress/ovn-egress/internal/testenv"
)

// metricRef finds the metric names an expression reads: ovn-egress's own
// and client-go's (their histograms' _bucket/_sum/_count series as named).
var metricRef = regexp.MustCompile(`\b(?:ovn_egress|workqueue|rest_client)_[a-z_]+\b`)

// monitoringReferencesExposed checks every expression of the chart's
// PrometheusRule and Grafana dashboard against what the running binaries
// expose: each metric an expression reads must be in a scrape of the
// leader master or of an agent. Called once the cluster has served traffic
// and failed over (so every series that exists only after an event does).
func (c *cluster) monitoringReferencesExposed() {
	c.t.Helper()
	exposed := map[string]bool{}
	add := func(m testenv.Samples) {
		for series := range m {
			name, _, _ := strings.Cut(series, "{")
			exposed[name] = true
		}
	}
	m, err := c.masterMetrics(c.leaderIndex())
	if err != nil {
		c.t.Fatal(err)
	}
	add(m)
	for node, p := range c.agents {
		if p.Stopped() {
			continue
		}
		if m, err := c.agentMetricsOf(node); err == nil {
			add(m)
		}
	}
	exprs := ruleExprs(c)
	if len(exprs) < 10 {
		c.t.Fatalf("the rendered PrometheusRule has %d expressions", len(exprs))
	}
	dash := dashboardExprs(c)
	if len(dash) < 10 {
		c.t.Fatalf("the dashboard has %d expressions", len(dash))
	}
	for where, list := range map[string][]string{"PrometheusRule": exprs, "dashboard": dash} {
		for _, e := range list {
			refs := metricRef.FindAllString(e, -1)
			if len(refs) == 0 {
				c.t.Errorf("%s: %q reads no ovn-egress or client-go metric", where, e)
			}
			for _, r := range refs {
				if !exposed[r] {
					c.t.Errorf("%s: %q reads %s, which neither the master nor an agent exposes", where, e, r)
				}
			}
		}
	}
}

// ruleExprs are the expressions of the PrometheusRule the chart renders
// with monitoring.prometheusRule.enabled.
func ruleExprs(c *cluster) []string {
	r := testenv.RenderChart(c.t, map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true}}})
	var out []string
	for _, doc := range strings.Split(r.Manifests, "\n---") {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Groups []struct {
					Rules []struct {
						Alert string `json:"alert"`
						Expr  string `json:"expr"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj.Kind != "PrometheusRule" {
			continue
		}
		for _, g := range obj.Spec.Groups {
			for _, rule := range g.Rules {
				out = append(out, rule.Expr)
			}
		}
	}
	return out
}

// dashboardExprs are the expressions of the dashboard's panels.
func dashboardExprs(c *cluster) []string {
	b, err := os.ReadFile(filepath.Join(testenv.ChartDir(), "files", "monitoring", "dashboard.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, t.Expr)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
