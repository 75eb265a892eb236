package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// thawQEMUs are the live (not zombie) QEMU processes of VMs on dataDir or
// its memory store: pid to the VM id their -name gives.
func thawQEMUs(t *testing.T, dataDir string) map[int]string {
	t.Helper()
	dirs := [][]byte{[]byte(dataDir + "/"), []byte(storeDir(t, dataDir) + "/")}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	out := map[int]string{}
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || !processLive(pid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(b, []byte{0})
		id := ""
		for i, a := range args {
			if string(a) == "-name" && i+1 < len(args) && bytes.HasPrefix(args[i+1], []byte("thaw-")) {
				id = strings.TrimPrefix(string(args[i+1]), "thaw-")
			}
		}
		if id != "" && (bytes.Contains(b, dirs[0]) || bytes.Contains(b, dirs[1])) {
			out[pid] = id
		}
	}
	return out
}

// processLive: pid exists and is no zombie.
func processLive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// kill -9 of a daemon with ready clones (one waiting, its refill under way
// or done): the next daemon on the same data directory kills every QEMU the
// dead one left, records the clones failed, adopts none, and serves ready
// clones again.
func TestReadyClonesKill9(t *testing.T) {
	dataDir := t.TempDir()
	args := []string{"--standby-memory", "1024", "--keep-alive", "-1s"}
	d, err := startThawd(t, dataDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New("unix:" + d.sock)
	ctx := ctxT(t)
	vm, _ := bootSnapshot(t, c, "hello", "functions/hello")
	if err := c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	byName := func(c *client.Client) *client.Invocation {
		t.Helper()
		inv, err := c.InvokeFunction(ctx, "hello", ev(`{"name":"kill"}`), client.InvokeOptions{})
		if err != nil || !inv.OK {
			t.Fatalf("invoke: %v %+v", err, inv)
		}
		return inv
	}
	byName(c) // a miss; its traffic makes the daemon keep a clone
	waitReadyClone(t, ctx, c)
	if inv := byName(c); inv.Mode != "ready" {
		t.Fatalf("mode %s with a ready clone waiting", inv.Mode)
	}
	// Its refill: kill the daemon while it restores if it is seen doing so.
	var states []string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && len(states) == 0; time.Sleep(20 * time.Millisecond) {
		vms, err := c.ListVMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			if v.State == "booting" || v.State == "running" || v.State == "ready" {
				states = append(states, v.ID+" "+v.State)
			}
		}
	}
	old := thawQEMUs(t, dataDir)
	t.Logf("killing thawd with VMs %v, QEMU processes %v", states, old)
	if len(old) == 0 {
		t.Fatal("no QEMU of the daemon runs: nothing to show")
	}
	d.kill()
	time.Sleep(200 * time.Millisecond)
	orphans := thawQEMUs(t, dataDir)
	t.Logf("QEMU processes that outlived their daemon: %v", orphans)

	d2, err := startThawd(t, dataDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	c2 := client.New("unix:" + d2.sock)
	for pid, id := range old {
		if processLive(pid) {
			t.Errorf("QEMU %d of VM %s of the killed daemon runs after the restart", pid, id)
		}
	}
	if left := thawQEMUs(t, dataDir); len(left) != 0 {
		t.Errorf("QEMU processes on the data directory after the restart, with no request since: %v", left)
	}
	vms, err := c2.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.State != "failed" && v.State != "stopped" {
			t.Errorf("vm %s is %s after the restart (reason %q)", v.ID, v.State, v.Reason)
		}
	}
	// Ready clones work again on the new daemon.
	if inv := byName(c2); inv.Mode != "cold" {
		t.Fatalf("first request after the restart: mode %s (no clone may be adopted)", inv.Mode)
	}
	waitReadyClone(t, ctx, c2)
	if inv := byName(c2); inv.Mode != "ready" {
		t.Fatalf("after the restart: mode %s with a ready clone waiting", inv.Mode)
	}
}
