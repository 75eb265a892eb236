package cluster

import (
	"context"

	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"github.com/thaw-dev/thaw/internal/registry"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCAIssue: a node's certificate verifies against the CA for its name
// and its address, and for nothing else; its key is private.
func TestCAIssue(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("10.200.1.11")
	certFile, keyFile, err := ca.Issue(dir, "node-1", addr)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(ca.CertFile)
	if b, _ := pem.Decode(caPEM); b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("ca.pem is not a PEM certificate")
	}
	for _, name := range []string{"node-1", "10.200.1.11"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: name}); err != nil {
			t.Errorf("verify as %s: %v", name, err)
		}
	}
	for _, name := range []string{"node-2", "10.200.1.12"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: name}); err == nil {
			t.Errorf("verified as %s", name)
		}
	}
	other, _ := NewCA(t.TempDir(), "other")
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: other.Pool(), DNSName: "node-1"}); err == nil {
		t.Error("verified against another CA")
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", st.Mode(), err)
	}
	if _, _, err := ca.Issue(dir, "", addr); err == nil {
		t.Error("issued a certificate without a name")
	}
}

// TestNetwork: node namespaces reach the host over the bridge, and Close
// leaves nothing behind.
func TestNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	n, err := NewNetwork()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ns, err := n.AddNode(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddNode(0); err == nil {
		t.Error("added node 0")
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort(n.HostIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("host\n"))
			c.Close()
		}
	}()
	// From inside the node's namespace, as its thawd would.
	out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "python3", "-c",
		"import socket; s=socket.create_connection(('"+n.HostIP.String()+"', "+portOf(ln)+"), timeout=3); print(s.makefile().readline().strip())").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "host" {
		t.Fatalf("node -> host: %v %s", err, out)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
		t.Errorf("namespace %s left behind", ns)
	}
	if _, err := net.InterfaceByName(n.Bridge); err == nil {
		t.Errorf("bridge %s left behind", n.Bridge)
	}
}

func portOf(ln net.Listener) string {
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

// TestKillTree: a process and everything below it die.
func TestKillTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var kids []int
	for i := 0; i < 100 && len(kids) < 2; i++ {
		time.Sleep(20 * time.Millisecond)
		kids = descendants(cmd.Process.Pid)
	}
	if len(kids) < 2 {
		t.Fatalf("descendants = %v, want the two sleeps", kids)
	}
	if err := KillTree(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, k := range kids {
		for i := 0; ; i++ {
			// A killed child of the reaped shell is reaped by init; until
			// then it is a zombie.
			err := syscall.Kill(k, 0)
			if err != nil || zombie(k) {
				break
			}
			if i > 100 {
				t.Fatalf("process %d survived", k)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// TestStoreLink: the object store runs in its namespace behind the
// emulated link, whose added round trip and rate the link check measures
// (1 ms at 1 Gbit/s, the default, and 20 ms at 100 Mbit/s); a stopped
// store fails the check; Close leaves nothing behind.
func TestStoreLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := os.Stat(DefaultMinIO()); err != nil {
		t.Skipf("no MinIO at %s (scripts/install-deps.sh builds it)", DefaultMinIO())
	}
	for _, l := range []Link{DefaultLink, {RTT: 20 * time.Millisecond, RateMbit: 100}} {
		t.Run(l.String(), func(t *testing.T) { checkStoreLink(t, l) })
	}
}

func checkStoreLink(t *testing.T, l Link) {
	n, err := NewNetwork()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: t.TempDir(), Net: n}
	t.Cleanup(func() { c.Store.Close(); n.Close() })
	ctx := context.Background()
	if err := c.startStore(ctx, StoreConfig{Link: l}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(c.Store.ConfigFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("registry config %v (%v), want mode 0600", st, err)
	}
	if _, err := registry.LoadConfig(c.Store.ConfigFile, func(string) string { return "" }); err != nil {
		t.Fatalf("the registry config does not load: %v", err)
	}
	lc, err := c.Store.CheckLink(ctx, int64(l.RateMbit)<<15) // a quarter second at the rate
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("requests %.2f ms, %.2f ms past the link: the link adds %.2f ms; get %.0f Mbit/s, put %.0f Mbit/s",
		lc.RTTMedianMS, lc.DirectMedianMS, lc.AddedMS, lc.GetMbit, lc.PutMbit)
	want := float64(l.RTT.Microseconds()) / 1000
	if lc.AddedMS < want*0.95 || lc.AddedMS > want*1.5+0.5 {
		t.Errorf("the link adds %.2f ms, want about %.2f", lc.AddedMS, want)
	}
	rate := float64(l.RateMbit)
	if lc.GetMbit > rate*1.05 || lc.GetMbit < rate*0.4 || lc.PutMbit > rate*1.05 {
		t.Errorf("get %.0f, put %.0f Mbit/s; want at most %.0f (the limit) and the get near it", lc.GetMbit, lc.PutMbit, rate)
	}
	if err := c.Net.ShapeStoreLink(Link{RTT: -time.Second}); err == nil {
		t.Error("a negative round trip was accepted")
	}
	c.Store.Stop()
	if _, err := c.Store.CheckLink(ctx, 1<<20); err == nil {
		t.Error("the link check passed with the store stopped")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + n.StoreNamespace()); err == nil {
		t.Errorf("namespace %s left behind", n.StoreNamespace())
	}
}

// TestLinkArgs: the rate half of the link is a token bucket whose burst
// holds at least one GSO packet; no rate is a plain FIFO; bad links are
// refused with every problem named.
func TestLinkArgs(t *testing.T) {
	for _, c := range []struct {
		l    Link
		want string
	}{
		{Link{RTT: time.Millisecond, RateMbit: 1000}, "tbf rate 1000mbit burst 500000 latency 100ms"},
		{Link{RateMbit: 10}, "tbf rate 10mbit burst 131072 latency 100ms"},
		{Link{RTT: time.Millisecond}, "pfifo"},
	} {
		if got := strings.Join(c.l.qdiscArgs(), " "); got != c.want {
			t.Errorf("%v: %q, want %q", c.l, got, c.want)
		}
		if err := c.l.Validate(); err != nil {
			t.Errorf("%v: %v", c.l, err)
		}
	}
	err := Link{RTT: -time.Millisecond, RateMbit: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "round trip -1ms") || !strings.Contains(err.Error(), "rate -1") {
		t.Errorf("bad link: %v", err)
	}
}
