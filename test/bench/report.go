package main

import (
	"encoding/json"
	"fmt"
	"github.com/ovn-egress/ovn-egress/internal/testenv"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// result is what one scenario measured; it is written as one JSON file.
type result struct {
	Scenario   string         `json:"scenario"`
	Started    time.Time      `json:"started"`
	Seconds    float64        `json:"duration_s"`
	Size       size           `json:"size"`
	Machine    machine        `json:"machine"`
	LoadBefore [3]float64     `json:"load_average_before"`
	LoadAfter  [3]float64     `json:"load_average_after"`
	Metrics    []metric       `json:"metrics"`
	Checks     []check        `json:"checks"`
	Details    map[string]any `json:"details,omitempty"`
	Notes      []string       `json:"notes,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// metric is one number the scenario measured.
type metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// check is a measured value against its DESIGN §6 target.
type check struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Op       string  `json:"op"` // <=, <, >=, ==
	Limit    float64 `json:"limit"`
	Measured string  `json:"measured"`
	Target   string  `json:"target"`
	OK       bool    `json:"ok"`
}

func newResult(name string, sz size) *result {
	return &result{Scenario: name, Started: time.Now(), Size: sz, LoadBefore: loadAvg(), Details: map[string]any{}}
}

func (r *result) metric(name string, v float64, unit string) {
	r.Metrics = append(r.Metrics, metric{Name: name, Value: round(v, 4), Unit: unit})
}

// seconds records a duration metric.
func (r *result) seconds(name string, d time.Duration) {
	r.metric(name, d.Seconds(), "s")
}

func (r *result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// check records value against limit with op; measured and target are the
// human forms printed in the table.
func (r *result) check(name string, value float64, unit, op string, limit float64, measured, target string) {
	ok := false
	switch op {
	case "<=":
		ok = value <= limit
	case "<":
		ok = value < limit
	case ">=":
		ok = value >= limit
	case "==":
		ok = value == limit
	}
	if math.IsNaN(value) || math.IsInf(value, 0) {
		ok = false
	}
	r.Checks = append(r.Checks, check{Name: name, Value: round(value, 4), Unit: unit, Op: op, Limit: round(limit, 4),
		Measured: measured, Target: target, OK: ok})
}

// round rounds to digits decimals; a number that could not be measured
// (NaN, ±Inf) becomes -1, which JSON can carry.
func round(v float64, digits int) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -1
	}
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// ratio divides, with 0/0 = NaN (a missing number shows as missing).
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// times renders a ratio: two decimals below 10, none above.
func times(x float64) string {
	if x < 10 {
		return fmt.Sprintf("%.2f×", x)
	}
	return fmt.Sprintf("%.0f×", x)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
func sec(d time.Duration) string {
	if d < time.Second {
		return ms(d)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// write stores the result as <out>/<date>-<scenario>.json.
func (r *result) write(dir, stamp string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode %s result: %w", r.Scenario, err)
	}
	path := filepath.Join(dir, stamp+"-"+r.Scenario+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// printTable prints every check of every result, MISSED where one is.
func printTable(out io.Writer, results []*result) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCHECK\tMEASURED\tTARGET (DESIGN §6)\tRESULT")
	missed := 0
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t(scenario failed)\t%s\t\tERROR\n", r.Scenario, oneLine(r.Error))
			missed++
			continue
		}
		for _, c := range r.Checks {
			status := "ok"
			if !c.OK {
				status = "MISSED"
				missed++
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Scenario, c.Name, c.Measured, c.Target, status)
		}
	}
	tw.Flush()
	if missed > 0 {
		fmt.Fprintf(out, "\n%d target(s) MISSED or failed; the notes in the JSON files and docs/performance.md say why.\n", missed)
	} else {
		fmt.Fprintln(out, "\nevery target met")
	}
}

// printMetrics prints every scenario's numbers.
func printMetrics(out io.Writer, r *result) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\n== %s (%.1f s, load %.2f → %.2f)\n", r.Scenario, r.Seconds, r.LoadBefore[0], r.LoadAfter[0])
	for _, m := range r.Metrics {
		fmt.Fprintf(tw, "  %s\t%s %s\n", m.Name, strconv.FormatFloat(m.Value, 'f', -1, 64), m.Unit)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(tw, "  note: %s\n", n)
	}
	tw.Flush()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// machine are the facts a result is only comparable with.
type machine struct {
	Cores     int    `json:"cores"`
	CPU       string `json:"cpu"`
	MemoryGiB string `json:"memory_gib"`
	Kernel    string `json:"kernel"`
	OS        string `json:"os"`
	OVN       string `json:"ovn"`
	OVS       string `json:"ovs"`
	Go        string `json:"go"`
	Kube      string `json:"kube_apiserver,omitempty"`
}

func machineFacts(kubeAPIServer string) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	m.Kernel = strings.TrimSpace(readFile("/proc/sys/kernel/osrelease"))
	for _, line := range strings.Split(readFile("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			m.CPU = strings.TrimSpace(v)
			break
		}
	}
	for _, line := range strings.Split(readFile("/proc/meminfo"), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			m.MemoryGiB = fmt.Sprintf("%.1f", kb/1024/1024)
		}
	}
	for _, line := range strings.Split(readFile("/etc/os-release"), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			m.OS = strings.Trim(v, `"`)
		}
	}
	dir := ""
	if inst, err := testenv.SelectedOVN(); err == nil && inst.BinDir != "" {
		dir = inst.BinDir + "/"
	}
	m.OVN = firstLine(dir+"ovn-northd", "--version")
	m.OVS = firstLine(dir+"ovsdb-server", "--version")
	if kubeAPIServer != "" {
		m.Kube = firstLine(kubeAPIServer, "--version")
	}
	return m
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func firstLine(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func loadAvg() [3]float64 {
	var l [3]float64
	f := strings.Fields(readFile("/proc/loadavg"))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}
