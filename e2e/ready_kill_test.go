package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// thawQEMUs are the live (not zombie) QEMU processes among root's
// descendants: pid to the VM id their -name gives.
func thawQEMUs(t *testing.T, root int) map[int]string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	parent := map[int]int{}
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(p, "stat")); err == nil {
			if i := bytes.LastIndexByte(b, ')'); i > 0 {
				var state string
				var ppid int
				fmt.Sscan(string(b[i+1:]), &state, &ppid)
				parent[pid] = ppid
			}
		}
	}
	out := map[int]string{}
	for pid := range parent {
		if !descends(parent, pid, root) || !processLive(pid) {
			continue
		}
		if id := qemuVM(pid); id != "" {
			out[pid] = id
		}
	}
	return out
}

// descends: pid is root or one of its descendants.
func descends(parent map[int]int, pid, root int) bool {
	for seen := 0; pid > 1 && seen < 64; seen++ {
		if pid == root {
			return true
		}
		pid = parent[pid]
	}
	return false
}

// qemuVM is the VM id of QEMU process pid ("-name thaw-ID"), or "".
func qemuVM(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	args := bytes.Split(b, []byte{0})
	for i, a := range args {
		if string(a) == "-name" && i+1 < len(args) && bytes.HasPrefix(args[i+1], []byte("thaw-")) {
			return strings.TrimPrefix(string(args[i+1]), "thaw-")
		}
	}
	return ""
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

// kill -9 of a daemon with ready clones (its refill under way, or done,
// when the daemon dies): the next daemon on the same data directory kills every QEMU the
// dead one left, records the clones failed, adopts none, and serves ready
// clones again.
func TestReadyClonesKill9(t *testing.T) {
	parallel(t)
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
	hit := byName(c)
	if hit.Mode != "ready" {
		t.Fatalf("mode %s with a ready clone waiting", hit.Mode)
	}
	waitFill(t, c, hit.VM)
	old := thawQEMUs(t, d.cmd.Process.Pid)
	t.Logf("killing thawd with QEMU processes %v", old)
	if len(old) == 0 {
		t.Fatal("no QEMU of the daemon runs: nothing to show")
	}
	d.kill()
	time.Sleep(200 * time.Millisecond)
	orphans := map[int]string{}
	for pid, id := range old {
		if processLive(pid) {
			orphans[pid] = id
		}
	}
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
	checkAfterRestart(t, c2, d2, old)
	// Ready clones work again on the new daemon.
	if inv := byName(c2); inv.Mode != "cold" {
		t.Fatalf("first request after the restart: mode %s (no clone may be adopted)", inv.Mode)
	}
	waitReadyClone(t, ctx, c2)
	if inv := byName(c2); inv.Mode != "ready" {
		t.Fatalf("after the restart: mode %s with a ready clone waiting", inv.Mode)
	}
}

// waitFill waits until c lists a ready clone or one being filled, other
// than VM hit (the one a request took), and says which.
func waitFill(t *testing.T, c *client.Client, hit string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		vms, err := c.ListVMs(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		var states []string
		filling := false
		for _, v := range vms {
			if v.ID != hit && (v.State == "booting" || v.State == "running" || v.State == "ready") {
				states = append(states, v.ID+" "+v.State)
				filling = filling || v.State != "ready"
			}
		}
		if len(states) > 0 {
			t.Logf("VMs when killed: %v (a fill under way: %v)", states, filling)
			return
		}
	}
	t.Fatal("no refill within 2 minutes")
}

// checkAfterRestart: the VMs of the killed daemon (old: their QEMUs) are
// recorded failed or stopped, no ready clone is listed, and every QEMU
// the new daemon runs is a VM it lists.
func checkAfterRestart(t *testing.T, c *client.Client, d *thawd, old map[int]string) {
	t.Helper()
	vms, err := c.ListVMs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, v := range vms {
		for _, id := range old {
			if v.ID == id && v.State != "failed" && v.State != "stopped" {
				t.Errorf("vm %s of the killed daemon is %s after the restart (reason %q)", v.ID, v.State, v.Reason)
			}
		}
		if v.State == "ready" {
			t.Errorf("ready clone %s after the restart, with no request since", v.ID)
		}
		live[v.ID] = true
	}
	for pid, id := range thawQEMUs(t, d.cmd.Process.Pid) {
		if !live[id] {
			t.Errorf("QEMU %d (VM %s) of the new daemon is no VM it lists", pid, id)
		}
	}
}
