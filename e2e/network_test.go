package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/tcptest"
)

// echoService listens on the host's loopback and sends back what it reads.
func echoService(t *testing.T) int {
	t.Helper()
	return tcptest.Serve(t, func(c net.Conn, _ int) { defer c.Close(); io.Copy(c, c) }).Port
}

// outside is a server in a network namespace the test creates, linked to
// the host by a veth pair: it stands in for the world beyond the host.
type outside struct {
	ns   string
	addr string // ip:port of its echo server
}

func newOutside(t *testing.T) *outside {
	t.Helper()
	n := outsideSlot(t, "thoh%d")
	o := &outside{ns: fmt.Sprintf("thaw-e2e-out-%d", n)}
	hostIf, nsIf := fmt.Sprintf("thoh%d", n), fmt.Sprintf("thon%d", n)
	hostIP, nsIP := fmt.Sprintf("10.250.%d.1", n), fmt.Sprintf("10.250.%d.2", n)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	run("netns", "add", o.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", o.ns).Run() })
	run("link", "add", hostIf, "type", "veth", "peer", "name", nsIf, "netns", o.ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })
	run("addr", "add", hostIP+"/24", "dev", hostIf)
	run("link", "set", hostIf, "up")
	run("-n", o.ns, "addr", "add", nsIP+"/24", "dev", nsIf)
	run("-n", o.ns, "link", "set", nsIf, "up")
	run("-n", o.ns, "link", "set", "lo", "up")
	run("-n", o.ns, "route", "add", "default", "via", hostIP)
	o.addr = nsIP + ":7000"
	startEcho(t, o.ns, nsIP)
	for i := 0; ; i++ { // the host itself reaches it: the stand-in works
		c, err := net.DialTimeout("tcp", o.addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if i > 50 {
			t.Fatalf("outside server: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return o
}

// startEcho serves, until the test ends, TCP port 7000 of ip in network
// namespace ns: each connection gets back what it sends, after "outside:".
func startEcho(t *testing.T, ns, ip string) {
	t.Helper()
	srv := exec.Command("ip", "netns", "exec", ns, "python3", "-c", `
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("`+ip+`", 7000)); s.listen(16)
def echo(c):
    with c:
        while True:
            b = c.recv(65536)
            if not b:
                return
            c.sendall(b"outside:" + b)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
`)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
}

type tryResult struct {
	Connected bool    `json:"connected"`
	Reply     string  `json:"reply"`
	Error     string  `json:"error"`
	MS        float64 `json:"ms"`
}

// try has the guest of vm open a TCP connection to host:port and send msg.
func try(t *testing.T, c *client.Client, vm, host string, port int, msg string) tryResult {
	t.Helper()
	ev, _ := json.Marshal(map[string]any{"op": "try", "host": host, "port": port, "send": msg})
	inv, err := c.InvokeVM(context.Background(), vm, ev, client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("invoke: %v %+v", err, inv)
	}
	var r tryResult
	if err := json.Unmarshal(inv.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// hostIPv4s lists every IPv4 address of the host's interfaces.
func hostIPv4s(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

func apiPort(t *testing.T, e *env) int {
	u, _ := url.Parse(e.srv.URL)
	p, _ := strconv.Atoi(u.Port())
	return p
}

// ownNetNamespaces counts the network namespaces the test process holds
// descriptors of, besides its own.
func ownNetNamespaces(t *testing.T) int {
	self, _ := os.Readlink("/proc/self/ns/net")
	fds, _ := filepath.Glob("/proc/self/fd/*")
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "net:[") && l != self {
			n++
		}
	}
	return n
}

// The attack found on the old code: guest code reached the daemon's API
// (and every host service) through 10.0.2.2. Now a guest reaches only what
// its function's policy allows, fails fast elsewhere, and its network goes
// with it.
//
// Serial: it counts the network namespaces the whole test process holds,
// and a parallel test's VMs would hold some too.
func TestGuestNetworkIsolation(t *testing.T) {
	e := startEnv(t, t.TempDir())
	ctx := ctxT(t)
	allowed, other := echoService(t), echoService(t)
	out := newOutside(t)
	if _, err := e.c.CreateFunctionFromDir(ctx, "probe", repoPath("e2e/testdata/probe"), 256, 1,
		client.WithServices(fmt.Sprintf("127.0.0.1:%d", allowed))); err != nil {
		t.Fatal(err)
	}
	before := ownNetNamespaces(t)
	boot, snap := snapshotBoot(t, e.c, "probe")
	clone, err := e.c.RestoreVM(ctx, snap.ID, "vanilla")
	if err != nil {
		t.Fatal(err)
	}
	api := apiPort(t, e)
	outHost, outPort, _ := net.SplitHostPort(out.addr)
	op, _ := strconv.Atoi(outPort)
	for _, vm := range []*client.VM{boot, clone} {
		if r := try(t, e.c, vm.ID, "10.0.2.2", allowed, "hello service"); !r.Connected || r.Reply != "hello service" {
			t.Errorf("vm %s: the allowed service: %+v", vm.ID, r)
		}
		refused := []struct {
			what, host string
			port       int
		}{{"the API at the gateway", "10.0.2.2", api}, {"another loopback service", "10.0.2.2", other},
			{"the outside", outHost, op}, {"the gateway's DNS", "10.0.2.3", 53}}
		for _, ip := range hostIPv4s(t) {
			refused = append(refused, struct {
				what, host string
				port       int
			}{"the API at host address " + ip, ip, api})
		}
		for _, r := range refused {
			res := try(t, e.c, vm.ID, r.host, r.port, "GET /v1/info HTTP/1.0\r\n\r\n")
			if res.Connected {
				t.Errorf("vm %s reached %s (%s:%d): %q", vm.ID, r.what, r.host, r.port, res.Reply)
			} else if res.MS > 2500 {
				t.Errorf("vm %s: %s failed only after %.0f ms (%s): a guest should fail fast", vm.ID, r.what, res.MS, res.Error)
			}
		}
	}
	_, err = e.c.CreateFunctionFromDir(ctx, "wide", repoPath("e2e/testdata/probe"), 256, 1, client.WithEgress("full"))
	wantAPIError(t, err, client.ErrForbidden, 403, "--allow-full-egress")
	for _, vm := range []*client.VM{boot, clone} {
		if err := e.c.DeleteVM(ctx, vm.ID); err != nil {
			t.Fatal(err)
		}
	}
	// The VMM pool's standby VMs have networks too; they go with them.
	vms, err := e.c.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.State == "standby" {
			if err := e.c.DeleteVM(ctx, v.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := ownNetNamespaces(t); n != before {
		t.Errorf("the daemon holds %d network namespaces after its VMs stopped, %d before", n, before)
	}
}

// Full egress, where the operator allows it: the guest reaches the world
// beyond the host, and still not the host itself.
func TestGuestFullEgress(t *testing.T) {
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.AllowFullEgress = true })
	ctx := ctxT(t)
	other := echoService(t)
	out := newOutside(t)
	if _, err := e.c.CreateFunctionFromDir(ctx, "wide", repoPath("e2e/testdata/probe"), 256, 1, client.WithEgress("full")); err != nil {
		t.Fatal(err)
	}
	vm, err := e.c.BootVM(ctx, "wide")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(out.addr)
	p, _ := strconv.Atoi(port)
	if r := try(t, e.c, vm.ID, host, p, "hi"); !r.Connected || r.Reply != "outside:hi" {
		t.Errorf("full egress did not reach the outside: %+v", r)
	}
	api := apiPort(t, e)
	targets := [][2]any{{"10.0.2.2", api}, {"10.0.2.2", other}, {"169.254.1.1", api}}
	for _, ip := range hostIPv4s(t) {
		targets = append(targets, [2]any{ip, api}, [2]any{ip, other})
	}
	for _, tg := range targets {
		if r := try(t, e.c, vm.ID, tg[0].(string), tg[1].(int), "GET /v1/info HTTP/1.0\r\n\r\n"); r.Connected {
			t.Errorf("full egress reached the host at %v:%v: %q", tg[0], tg[1], r.Reply)
		}
	}
	links := func() string { b, _ := exec.Command("ip", "-o", "link").Output(); return string(b) }
	veth := "thv" + strings.TrimPrefix(vm.ID, "vm-")
	if !strings.Contains(links(), veth) {
		t.Errorf("no host link %s while the VM runs", veth)
	}
	if err := e.c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Contains(links(), veth) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(links(), veth) {
		t.Errorf("host link %s outlived its VM", veth)
	}
}
