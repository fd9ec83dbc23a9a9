package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Samples are one scrape of a Prometheus text endpoint: value by series,
// the series written as the exposition writes it, name{label="value",...}
// with the labels sorted by name ("name" alone without labels).
type Samples map[string]float64

// Series names a series the way Samples keys it; labels are name, value
// pairs in any order.
func Series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	var ps []string
	for i := 0; i+1 < len(labels); i += 2 {
		ps = append(ps, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(ps)
	return name + "{" + strings.Join(ps, ",") + "}"
}

// Get returns a series' value and whether the scrape had it.
func (s Samples) Get(name string, labels ...string) (float64, bool) {
	v, ok := s[Series(name, labels...)]
	return v, ok
}

// Sum adds every series of a metric name (all label values).
func (s Samples) Sum(name string) float64 {
	var sum float64
	for k, v := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}

// Scrape reads a /metrics endpoint (text format) over HTTP.
func Scrape(ctx context.Context, url string) (Samples, error) { return ScrapeIn(ctx, nil, url) }

// ScrapeIn scrapes from inside ns (nil: this process's namespace): a
// listener on a test namespace's loopback.
func ScrapeIn(ctx context.Context, ns *NetNS, url string) (Samples, error) {
	code, body, err := HTTPGetIn(ctx, ns, url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d: %s", url, code, body)
	}
	return ParseSamples(strings.NewReader(body))
}

// ParseSamples reads the text exposition format: comments are skipped,
// every other line is `series value [timestamp]`.
func ParseSamples(r io.Reader) (Samples, error) {
	out := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// The value follows the labels' closing brace (or the bare name).
		var series string
		var fields []string
		if end := strings.LastIndexByte(line, '}'); end >= 0 {
			series, fields = line[:end+1], strings.Fields(line[end+1:])
		} else if fields = strings.Fields(line); len(fields) > 0 {
			series, fields = fields[0], fields[1:]
		}
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[series] = v
	}
	return out, sc.Err()
}

// HTTPGet fetches url (a loopback address) and returns the status code and
// body.
func HTTPGet(ctx context.Context, url string) (int, string, error) { return HTTPGetIn(ctx, nil, url) }

// HTTPGetIn fetches url with the connection made inside ns (nil: this
// process's namespace).
func HTTPGetIn(ctx context.Context, ns *NetNS, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	tr := &http.Transport{DisableKeepAlives: true}
	if ns != nil {
		tr.DialContext = func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			// The socket is made on the thread Do moved into ns.
			nsErr := ns.Do(func() error {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return nil
			})
			return conn, errors.Join(nsErr, err)
		}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
