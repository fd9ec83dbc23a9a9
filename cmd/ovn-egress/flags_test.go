package main

import (
	"strings"
	"testing"
)

// TestMetricsAddress: --metrics-ip replaces --metrics-address's host part
// in either family (the chart passes the node's IP from the downward API).
func TestMetricsAddress(t *testing.T) {
	for _, tc := range []struct{ addr, ip, want, err string }{
		{":9477", "", ":9477", ""},
		{"", "172.18.0.2", "", ""},
		{":9477", "172.18.0.2", "172.18.0.2:9477", ""},
		{"0.0.0.0:9477", "fc00:f853:ccd:e793::3", "[fc00:f853:ccd:e793::3]:9477", ""},
		{":9477", "node1", "", "--metrics-ip"},
		{"9477", "172.18.0.2", "", "--metrics-address"},
	} {
		got, err := metricsAddress(tc.addr, tc.ip)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %q: %q, %v; want an error naming %s", tc.addr, tc.ip, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q %q: %q, %v; want %q", tc.addr, tc.ip, got, err, tc.want)
		}
	}
}
