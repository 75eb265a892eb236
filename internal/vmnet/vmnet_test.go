package vmnet

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/tcptest"
)

func TestParseService(t *testing.T) {
	for _, tt := range []struct {
		in, target, guest, err string
	}{
		{in: "127.0.0.1:6379", target: "127.0.0.1:6379", guest: "10.0.2.2:6379"},
		{in: "localhost:5432", target: "127.0.0.1:5432", guest: "10.0.2.2:5432"},
		{in: "127.1.2.3:80", target: "127.1.2.3:80", guest: "10.0.2.2:80"},
		{in: "192.168.1.10:5432", target: "192.168.1.10:5432", guest: "192.168.1.10:5432"},
		{in: "10.0.2.2:80", err: "inside the guest's own network"},
		{in: "10.0.2.77:80", err: "inside the guest's own network"},
		{in: "db.internal:5432", err: "name services by IPv4 address"},
		{in: "[::1]:80", err: "host:port"},
		{in: "127.0.0.1", err: "host:port"},
		{in: "127.0.0.1:0", err: "1-65535"},
		{in: "127.0.0.1:65536", err: "1-65535"},
		{in: "0.0.0.0:80", err: "not a host address"},
		{in: "224.0.0.1:80", err: "not a host address"},
	} {
		s, err := ParseService(tt.in)
		if tt.err != "" {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || s.Target.String() != tt.target || s.Guest.String() != tt.guest {
			t.Errorf("%s: %+v %v", tt.in, s, err)
		}
	}
}

func TestPolicyNormalize(t *testing.T) {
	for _, tt := range []struct {
		p    Policy
		want Egress
		err  string
	}{
		{p: Policy{}, want: EgressNone},
		{p: Policy{Services: []string{"127.0.0.1:1"}}, want: EgressServices},
		{p: Policy{Egress: EgressFull}, want: EgressFull},
		{p: Policy{Egress: EgressServices}, err: "lists no service"},
		{p: Policy{Egress: EgressNone, Services: []string{"127.0.0.1:1"}}, err: "use egress"},
		{p: Policy{Egress: "everything"}, err: "not none, services or full"},
		{p: Policy{Services: []string{"127.0.0.1:1", "localhost:1"}}, err: "listed twice"},
		{p: Policy{Services: strings.Split(strings.Repeat("127.0.0.1:1,", 17), ",")[:17]}, err: "at most 16"},
	} {
		got, err := tt.p.Normalize()
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%+v: %v, want %q", tt.p, err, tt.err)
			}
			continue
		}
		if err != nil || got.Egress != tt.want {
			t.Errorf("%+v: %+v %v", tt.p, got, err)
		}
	}
}

func root(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// logMedian logs the median and maximum of ds, the set-up times of what.
func logMedian(t *testing.T, what string, ds []time.Duration) {
	t.Helper()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	t.Logf("%s: median %s, max %s", what, ds[len(ds)/2], ds[len(ds)-1])
}

// From inside a VM's namespace (where the guest's packets arrive), the
// allowed service answers through the proxy, bytes exact and half-closes
// passed on; nothing else listens.
func TestAttachServices(t *testing.T) {
	root(t)
	echo := tcptest.Serve(t, func(c net.Conn, _ int) { defer c.Close(); io.Copy(c, c) })
	port := echo.Port
	h := &Host{log: discard}
	p, err := Policy{Services: []string{echo.String()}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	n, err := h.Attach("vm-test", p)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Tap() == nil {
		t.Fatal("no tap")
	}
	err = inNamespace(n.ns.ns, func() error {
		c, err := net.Dial("tcp4", netip.AddrPortFrom(Gateway, uint16(port)).String())
		if err != nil {
			return err
		}
		defer c.Close()
		msg := strings.Repeat("thaw ", 100000)
		go func() { c.Write([]byte(msg)); c.(*net.TCPConn).CloseWrite() }()
		got, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		if string(got) != msg {
			t.Errorf("echo returned %d bytes, want %d", len(got), len(msg))
		}
		if _, err := net.DialTimeout("tcp4", netip.AddrPortFrom(Gateway, uint16(port+1)).String(), time.Second); err == nil {
			t.Errorf("a port that is not a service answered")
		}
		if _, err := net.DialTimeout("tcp4", echo.String(), time.Second); err == nil {
			t.Errorf("the host's loopback is reachable from the namespace")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := n.Connections(); a != 1 {
		t.Errorf("accepted %d connections, want 1", a)
	}
}

// Connections past MaxConns are closed at once; closing the network cuts
// the open ones.
func TestConnectionLimit(t *testing.T) {
	root(t)
	var held []net.Conn // kept open until the test ends
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	hold := tcptest.Serve(t, func(c net.Conn, _ int) { mu.Lock(); held = append(held, c); mu.Unlock() })
	h := &Host{log: discard}
	p, _ := Policy{Services: []string{hold.String()}}.Normalize()
	n, err := h.Attach("vm-limit", p)
	if err != nil {
		t.Fatal(err)
	}
	port := hold.Port
	var conns []net.Conn
	inNamespace(n.ns.ns, func() error {
		for i := 0; i < MaxConns+5; i++ {
			c, err := net.Dial("tcp4", netip.AddrPortFrom(Gateway, uint16(port)).String())
			if err == nil {
				conns = append(conns, c)
			}
		}
		return nil
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, r := n.Connections()
		if a == MaxConns && r == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("accepted %d refused %d, want %d and 5", a, r, MaxConns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.Close()
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection stayed open after Close: %v", err)
		}
	}
}

// The cost of a VM's network, the part of restore set-up it adds.
func TestAttachTime(t *testing.T) {
	root(t)
	h := &Host{log: discard}
	var ds []time.Duration
	for range 30 {
		p, _ := Policy{Services: []string{"127.0.0.1:6379"}}.Normalize()
		n, err := h.Attach("vm-time", p)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, n.SetupTime)
		n.Close()
	}
	logMedian(t, "network with one service", ds)
}

// Full egress: a link to the host that goes with the network, and its cost
// (this turns on forwarding and installs the table inet thaw, as thawd
// --allow-full-egress does, in a namespace of the test's own).
func TestAttachFullEgress(t *testing.T) {
	privateNetns(t)
	h, err := NewHost(HostConfig{AllowFullEgress: true}, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var ds []time.Duration
	for i := range 10 {
		n, err := h.Attach(fmt.Sprintf("vm-egress%04d", i), Policy{Egress: EgressFull})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, n.SetupTime)
		link := n.veth
		if _, err := net.InterfaceByName(link); err != nil {
			t.Fatalf("no host link %s: %v", link, err)
		}
		n.Close()
		if _, err := net.InterfaceByName(link); err == nil {
			t.Fatalf("host link %s outlived its network", link)
		}
	}
	logMedian(t, "network with full egress", ds)
}

// A full-egress guest's DNS queries to 10.0.2.3 are answered by asking the
// host's resolvers (a stand-in resolver on loopback here).
func TestDNSRelay(t *testing.T) {
	root(t)
	res, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	go func() {
		b := make([]byte, 512)
		for {
			n, from, err := res.ReadFrom(b)
			if err != nil {
				return
			}
			res.WriteTo(append([]byte("answer:"), b[:n]...), from)
		}
	}()
	ns, err := newNamespace(nsSetup{dns: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.close()
	p := newProxy(discard, "vm-dns")
	defer p.close()
	if err := p.relayDNS(ns.dns, []netip.AddrPort{netip.MustParseAddrPort(res.LocalAddr().String())}); err != nil {
		t.Fatal(err)
	}
	err = inNamespace(ns.ns, func() error {
		c, err := net.Dial("udp4", "10.0.2.3:53")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		c.Write([]byte("query"))
		b := make([]byte, 512)
		n, err := c.Read(b)
		if err != nil {
			return err
		}
		if string(b[:n]) != "answer:query" {
			t.Errorf("reply %q", b[:n])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
