// Command echo is the kind suite's traffic tool, one static binary in one
// small image used three ways:
//
//	echo serve [-port 7777]            TCP and UDP echo: answers "seen=<source IP>"
//	echo ask -addr HOST:PORT [-proto tcp|udp] [-timeout 2s]
//	                                   asks once and prints the source IP the server saw
//	echo record|reset -addr HOST:PORT  prints (or forgets) every source the server saw
//
// The suite runs "serve" in the external container on the kind network
// (the partner's firewall of the story), in the backend pods (for pod → pod
// checks) and host-networked on a node (pod → node checks), and runs "ask"
// inside pods through the exec API. The external server keeps every source it
// ever answered, so the suite can assert that no pod address ever left the
// cluster, whatever the scenario did in between.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Request lines a TCP client sends first. A UDP datagram is always "ask".
const (
	reqAsk    = "ask"
	reqRecord = "record"
	reqReset  = "reset"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = serveCmd(args)
	case reqAsk:
		err = askCmd(args)
	case reqRecord, reqReset:
		err = controlCmd(cmd, args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: echo serve [-port N] | ask -addr HOST:PORT [-proto tcp|udp] [-timeout D] | record|reset -addr HOST:PORT")
	os.Exit(2)
}

// record is the set of sources the server answered, with a count each.
type record struct {
	mu   sync.Mutex
	seen map[netip.Addr]int
}

func (r *record) add(a netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[a.Unmap()]++
}

func (r *record) dump(w io.Writer) error {
	r.mu.Lock()
	lines := make([]string, 0, len(r.seen))
	for a, n := range r.seen {
		lines = append(lines, fmt.Sprintf("%s %d\n", a, n))
	}
	r.mu.Unlock()
	slices.Sort(lines)
	for _, l := range lines {
		if _, err := io.WriteString(w, l); err != nil {
			return fmt.Errorf("write record: %w", err)
		}
	}
	return nil
}

func (r *record) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.seen)
}

func serveCmd(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	port := fs.Int("port", 7777, "TCP and UDP port, on every address of the host")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("parse flags: %w", err)
	}
	addr := fmt.Sprintf(":%d", *port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen tcp: %w", err)
	}
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("listen udp: %w", err)
	}
	rec := &record{seen: map[netip.Addr]int{}}
	fmt.Printf("echo: serving tcp and udp on %s\n", addr)
	errc := make(chan error, 2)
	go func() { errc <- serveTCP(l, rec) }()
	go func() { errc <- serveUDP(pc, rec) }()
	return <-errc
}

func serveTCP(l net.Listener, rec *record) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		go handleTCP(c, rec)
	}
}

func handleTCP(c net.Conn, rec *record) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		return // a probe that connected and closed, or a stalled client
	}
	switch strings.TrimSpace(line) {
	case reqRecord:
		_ = rec.dump(c)
	case reqReset:
		rec.reset()
		fmt.Fprintln(c, "ok")
	default:
		rec.add(src)
		fmt.Printf("echo: tcp from %s\n", src)
		fmt.Fprintf(c, "seen=%s\n", src)
	}
}

func serveUDP(pc net.PacketConn, rec *record) error {
	buf := make([]byte, 512)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("read udp: %w", err)
		}
		src := from.(*net.UDPAddr).AddrPort().Addr().Unmap()
		rec.add(src)
		fmt.Printf("echo: udp from %s\n", src)
		if _, err := pc.WriteTo([]byte("seen="+src.String()+"\n"), from); err != nil {
			fmt.Fprintf(os.Stderr, "echo: answer %s: %v\n", src, err)
		}
	}
}

func askCmd(args []string) error {
	fs := flag.NewFlagSet("ask", flag.ExitOnError)
	addr := fs.String("addr", "", "server HOST:PORT ([v6]:PORT for IPv6)")
	proto := fs.String("proto", "tcp", "tcp or udp")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("parse flags: %w", err)
	}
	if *proto != "tcp" && *proto != "udp" {
		return fmt.Errorf("proto %q: want tcp or udp", *proto)
	}
	c, err := net.DialTimeout(*proto, *addr, *timeout)
	if err != nil {
		return fmt.Errorf("dial %s %s: %w", *proto, *addr, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(*timeout)); err != nil {
		return fmt.Errorf("deadline: %w", err)
	}
	if _, err := fmt.Fprintln(c, reqAsk); err != nil {
		return fmt.Errorf("send to %s: %w", *addr, err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("answer from %s %s: %w", *proto, *addr, err)
	}
	seen, ok := strings.CutPrefix(strings.TrimSpace(line), "seen=")
	if !ok {
		return fmt.Errorf("answer from %s: %q is not seen=<address>", *addr, line)
	}
	fmt.Println(seen)
	return nil
}

func controlCmd(req string, args []string) error {
	fs := flag.NewFlagSet(req, flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:7777", "server HOST:PORT")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("parse flags: %w", err)
	}
	c, err := net.DialTimeout("tcp", *addr, 2*time.Second)
	if err != nil {
		return fmt.Errorf("dial %s: %w", *addr, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return fmt.Errorf("deadline: %w", err)
	}
	if _, err := fmt.Fprintln(c, req); err != nil {
		return fmt.Errorf("send %s: %w", req, err)
	}
	if _, err := io.Copy(os.Stdout, c); err != nil {
		return fmt.Errorf("read %s: %w", req, err)
	}
	return nil
}
