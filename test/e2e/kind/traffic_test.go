package kind

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

var protocols = []string{"tcp", "udp"}

// execIn runs cmd in container of a pod through the API server's exec
// (WebSocket, falling back to SPDY) and returns stdout.
func (e *env) execIn(ctx context.Context, namespace, podName, container string, cmd ...string) (string, error) {
	req := e.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(podName).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		return "", fmt.Errorf("spdy executor: %w", err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(e.cfg, "GET", req.URL().String())
	if err != nil {
		return "", fmt.Errorf("websocket executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", fmt.Errorf("executor: %w", err)
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("exec %v in %s/%s: %w: %s", cmd, namespace, podName, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// ask has pod p ask the echo at dst over proto and returns the source the
// echo saw. It never touches e.t, so goroutines may call it.
func (e *env) ask(p *pod, proto string, dst netip.AddrPort) (netip.Addr, error) {
	ctx, cancel := ctxTimeout(15 * time.Second)
	defer cancel()
	out, err := e.execIn(ctx, e.ns, p.name, "echo", "/echo", "ask", "-proto", proto, "-addr", dst.String(), "-timeout", "2s")
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(strings.TrimSpace(out))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("answer %q: %w", out, err)
	}
	return a, nil
}

// expectSourceTo waits until p's TCP and UDP asks to dst are seen with a
// source in want, then checks that three more asks in a row agree.
func (e *env) expectSourceTo(p *pod, dst netip.AddrPort, timeout time.Duration, want ...netip.Addr) {
	e.t.Helper()
	for _, proto := range protocols {
		e.eventually(fmt.Sprintf("%s %s → %s seen as %v", proto, p, dst, want), timeout, func() (bool, string) {
			got, err := e.ask(p, proto, dst)
			if err != nil {
				return false, err.Error()
			}
			return slices.Contains(want, got), "seen " + got.String()
		})
		for range 3 {
			got, err := e.ask(p, proto, dst)
			if err != nil || !slices.Contains(want, got) {
				e.t.Fatalf("%s %s → %s: seen %s (%v) right after it was %v", proto, p, dst, got, err, want)
			}
		}
	}
}

// expectSource: p reaches the external container with a source in want.
func (e *env) expectSource(p *pod, f corev1.IPFamily, timeout time.Duration, want ...netip.Addr) {
	e.t.Helper()
	e.expectSourceTo(p, netip.AddrPortFrom(e.ext[f], echoPort), timeout, want...)
}

// expectNodeSource: p leaves with its own node's address of family f.
func (e *env) expectNodeSource(p *pod, f corev1.IPFamily, timeout time.Duration) {
	e.t.Helper()
	e.expectSource(p, f, timeout, e.nodeIP(p.node, f))
}

// expectBlocked: no ask of p reaches the external container for d.
func (e *env) expectBlocked(p *pod, f corev1.IPFamily, d time.Duration) {
	e.t.Helper()
	dst := netip.AddrPortFrom(e.ext[f], echoPort)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, proto := range protocols {
			if got, err := e.ask(p, proto, dst); err == nil {
				e.t.Fatalf("%s %s → %s got through (seen %s), want it blocked", proto, p, dst, got)
			}
		}
	}
	e.t.Logf("%s → %s blocked for %s", p, dst, d)
}

// keepAsking has p ask the external container over UDP and TCP without
// pause until the test ends, so that any datagram leaving with the pod's
// address during a transition lands in the echo's record. The asking stops
// in a cleanup registered now, so it runs before newEnv's leak check.
func (e *env) keepAsking(p *pod, f corev1.IPFamily) {
	dst := netip.AddrPortFrom(e.ext[f], echoPort)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, proto := range []string{"udp", "tcp"} {
				_, _ = e.ask(p, proto, dst)
			}
		}
	})
	e.t.Cleanup(func() {
		close(done)
		wg.Wait()
	})
}

// expectExternalReaches: the external container reaches the Service
// through its ingress IP (the LB IP answers on the node MetalLB chose).
func (e *env) expectExternalReaches(lb netip.Addr) {
	e.t.Helper()
	dst := netip.AddrPortFrom(lb, echoPort).String()
	e.eventually("external container → "+dst, time.Minute, func() (bool, string) {
		out, err := e.oci("exec", *flagExternal, "/echo", "ask", "-proto", "tcp", "-addr", dst, "-timeout", "2s")
		if err != nil {
			return false, err.Error()
		}
		return true, out
	})
}

// routeTable100 gives table 100 on node an on-link route to the external
// container's address (as the node's main table reaches it) at metric
// 100: an operator's network that leads outside.
func (e *env) routeTable100(node string, f corev1.IPFamily) {
	e.t.Helper()
	ext := e.ext[f].String()
	dev := routeDev(e.onNode(node, "ip", "-o", "route", "get", ext))
	if dev == "" {
		e.t.Fatalf("node %s: no route to %s", node, ext)
	}
	e.onNode(node, "ip", familyFlag(f), "route", "replace", ext, "dev", dev, "table", "100", "metric", "100")
	e.t.Cleanup(func() {
		_, _ = e.oci("exec", node, "ip", familyFlag(f), "route", "flush", "table", "100")
	})
}

// blackhole100 adds (on) or removes a blackhole for the external
// container's address in table 100 of node, at a better metric than the
// route routeTable100 made.
func (e *env) blackhole100(node string, f corev1.IPFamily, on bool) {
	e.t.Helper()
	op := "replace"
	if !on {
		op = "del"
	}
	e.onNode(node, "ip", familyFlag(f), "route", op, "blackhole", e.ext[f].String(), "table", "100", "metric", "50")
}

// routeDev picks "dev X" out of one line of `ip -o route get`.
func routeDev(line string) string {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "dev" {
			return f[i+1]
		}
	}
	return ""
}

func familyFlag(f corev1.IPFamily) string {
	if f == corev1.IPv6Protocol {
		return "-6"
	}
	return "-4"
}

// lower names objects per family: web-ipv4, web-ipv6.
func lower(f corev1.IPFamily) string { return strings.ToLower(string(f)) }

func hostPort(a netip.Addr, port int) netip.AddrPort { return netip.AddrPortFrom(a, uint16(port)) }
