package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/internal/tsc"
)

func ev(s string) json.RawMessage { return json.RawMessage(s) }

// The core paths on a real VM and on VMs restored from its snapshot
// (the shared fixture): warm and cold invocations, handler errors,
// concurrent clones, timeouts, crashes, corrupt snapshots, a full disk and
// a daemon restart. Each test stands alone.

func TestWarmInvoke(t *testing.T) {
	f, c := bootedFixture(t)
	inv, err := c.InvokeVM(ctxT(t), f.vm.ID, ev(`{"name":"e2e"}`), client.InvokeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !inv.OK || !strings.Contains(string(inv.Result), `"hello, e2e!"`) || inv.Mode != "warm" {
		t.Fatalf("invocation = %+v (result %s)", inv, inv.Result)
	}
}

func TestHandlerErrorKeepsVMUsable(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	inv, err := c.InvokeVM(ctx, f.vm.ID, ev(`{"op":"raise","why":"testing"}`), client.InvokeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if inv.OK || inv.Error == nil || inv.Error.Type != "ValueError" ||
		!strings.Contains(inv.Error.Message, "boom: testing") || !strings.Contains(inv.Error.Traceback, "handler.py") {
		t.Fatalf("want structured ValueError with traceback, got %+v", inv.Error)
	}
	inv, err = c.InvokeVM(ctx, f.vm.ID, ev(`{"op":"hello"}`), client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("next invocation after an error: %v %+v", err, inv)
	}
}

func TestGuestReachesHostService(t *testing.T) {
	f, c := bootedFixture(t)
	checkHostService(t, c, f.vm.ID, f.host)
}

// The booted VM keeps running after its snapshot was taken.
func TestBootedVMRunsAfterSnapshot(t *testing.T) {
	f, c := bootedFixture(t)
	if inv, err := c.InvokeVM(ctxT(t), f.vm.ID, ev(`{}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("%v %+v", err, inv)
	}
	if vm, err := c.GetVM(ctxT(t), f.vm.ID); err != nil || vm.State != "running" {
		t.Fatalf("booted vm after its snapshot: %+v %v", vm, err)
	}
}

func TestColdInvoke(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	inv, err := c.InvokeSnapshot(ctx, f.snap.ID, ev(`{"name":"cold"}`), client.InvokeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := inv.Timing.Restore
	if !inv.OK || !strings.Contains(string(inv.Result), "hello, cold!") || r == nil || r.SetupMS <= 0 || r.ResumeMS <= 0 || inv.Mode != "cold" || inv.Strategy != "vanilla" {
		t.Fatalf("cold invocation = %+v", inv)
	}
	t.Logf("cold: setup %.1f ms, resume %.1f ms, invoke %.1f ms, total %.1f ms", r.SetupMS, r.ResumeMS, inv.Timing.InvokeMS, inv.Timing.TotalMS)
	if _, err := c.GetVM(ctx, inv.VM); err == nil {
		t.Errorf("cold VM %s still listed after its invocation", inv.VM)
	}
	// The function's newest snapshot is the default for a cold invoke.
	snaps, err := c.ListSnapshots(ctx, "probe")
	if err != nil || len(snaps) == 0 {
		t.Fatalf("snapshots: %v %d", err, len(snaps))
	}
	inv, err = c.InvokeFunction(ctx, "probe", ev(`{"op":"count"}`), client.InvokeOptions{Strategy: "vanilla"})
	if err != nil || !inv.OK || inv.Snapshot != snaps[len(snaps)-1].ID {
		t.Fatalf("function cold invoke: %v %+v (newest snapshot %s)", err, inv, snaps[len(snaps)-1].ID)
	}
}

// Two clones restored at once from one snapshot are independent: each
// counts from the snapshot's state, reaches the host, writes privately;
// the snapshot they use cannot be deleted, they cannot be snapshotted, and
// a paused one refuses invocations until resumed.
func TestClonesFromOneSnapshot(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	vms, errs := atOnce(2, func(int) (*client.VM, error) { return c.RestoreVM(ctx, f.snap.ID, "vanilla") })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		defer c.DeleteVM(context.Background(), vms[i].ID)
	}
	// Interleave: clone 0 twice, clone 1 once. Each counts from the
	// snapshot's state, so neither sees the other's calls.
	counts := map[string][]int{}
	for _, id := range []string{vms[0].ID, vms[0].ID, vms[1].ID} {
		inv, err := c.InvokeVM(ctx, id, ev(`{"op":"count"}`), client.InvokeOptions{})
		if err != nil || !inv.OK {
			t.Fatalf("invoke %s: %v %+v", id, err, inv)
		}
		var r struct{ Calls int }
		_ = json.Unmarshal(inv.Result, &r)
		counts[id] = append(counts[id], r.Calls)
	}
	a, b := counts[vms[0].ID], counts[vms[1].ID]
	if a[1] != a[0]+1 || b[0] != a[0] {
		t.Fatalf("clone counters are not independent: clone0 %v clone1 %v", a, b)
	}
	checkHostService(t, c, vms[0].ID, f.host)
	for _, v := range vms { // clones write memory privately
		if inv, err := c.InvokeVM(ctx, v.ID, ev(`{"op":"write","mib":16}`), client.InvokeOptions{}); err != nil || !inv.OK {
			t.Fatalf("write: %v %+v", err, inv)
		}
	}
	wantAPIError(t, c.DeleteSnapshot(ctx, f.snap.ID), client.ErrConflict, 409, vms[0].ID[:3])
	_, err := c.CreateSnapshot(ctx, vms[0].ID)
	wantAPIError(t, err, client.ErrConflict, 409, "restored")

	if _, err := c.PauseVM(ctx, vms[1].ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.InvokeVM(ctx, vms[1].ID, ev(`{}`), client.InvokeOptions{})
	wantAPIError(t, err, client.ErrConflict, 409, "paused")
	if _, err := c.ResumeVM(ctx, vms[1].ID); err != nil {
		t.Fatal(err)
	}
	if inv, err := c.InvokeVM(ctx, vms[1].ID, ev(`{}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("after resume: %v %+v", err, inv)
	}
}

// Restores never change the snapshot's memory file (whatever restored
// from it before, in any test).
func TestSnapshotMemoryUnchangedByRestores(t *testing.T) {
	f, c := bootedFixture(t)
	v := f.clone(t, c)
	if inv, err := c.InvokeVM(ctxT(t), v.ID, ev(`{"op":"write","mib":8}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("write: %v %+v", err, inv)
	}
	if err := c.DeleteVM(ctxT(t), v.ID); err != nil {
		t.Fatal(err)
	}
	after, err := snapshot.HashFile(filepath.Join(f.snap.Dir, snapshot.MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	if after.SHA256 != f.memSHA {
		t.Fatalf("snapshot memory changed: %s -> %s", f.memSHA, after.SHA256)
	}
}

func TestInvocationTimeoutKillsGuest(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	v := f.clone(t, c)
	_, err := c.InvokeVM(ctx, v.ID, ev(`{"op":"sleep","seconds":30}`), client.InvokeOptions{Timeout: 1500 * time.Millisecond})
	wantAPIError(t, err, client.ErrTimeout, 504, "timed out")
	got := waitState(t, c, v.ID, "failed", 5*time.Second)
	if !strings.Contains(got.Reason, "timed out") || !processGone(v.PID) {
		t.Fatalf("after timeout: %+v (process gone: %v)", got, processGone(v.PID))
	}
	if _, err := os.Stat(v.RunDir); !os.IsNotExist(err) {
		t.Fatalf("run dir %s left behind", v.RunDir)
	}
	_, err = c.InvokeVM(ctx, v.ID, ev(`{}`), client.InvokeOptions{})
	wantAPIError(t, err, client.ErrConflict, 409, "failed")
	if err := c.DeleteVM(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
}

func TestCrashedVMMFailsAndFreesVM(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	v := f.clone(t, c)
	if err := syscall.Kill(v.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, c, v.ID, "failed", 10*time.Second)
	if !strings.Contains(got.Reason, "killed") {
		t.Fatalf("reason %q does not say the process was killed", got.Reason)
	}
	if _, err := os.Stat(v.RunDir); !os.IsNotExist(err) {
		t.Fatalf("run dir %s left behind", v.RunDir)
	}
	if err := c.DeleteVM(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
}

// Damaged snapshots are refused; the test damages a copy of the shared
// one.
func TestCorruptSnapshotsRefused(t *testing.T) {
	f, c := bootedFixture(t)
	cp, err := c.CopySnapshot(ctxT(t), f.snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	testCorruptSnapshot(t, c, cp)
}

func TestFullDiskLeavesNoPartialSnapshot(t *testing.T) {
	f, c := bootedFixture(t)
	testDiskFull(t, c, f.e.dataDir, f.vm.ID)
}

// A daemon restart (its own daemon: stopping it stops every VM) keeps the
// catalog, reconciles VMs whose process is gone and restores again.
func TestDaemonRestartKeepsCatalog(t *testing.T) {
	dataDir := t.TempDir()
	e := startEnv(t, dataDir)
	c := e.c
	ctx := ctxT(t)
	vm, snap := bootSnapshot(t, c, "probe", "e2e/testdata/probe")
	for _, event := range []string{`{}`, `{"op":"count"}`} {
		if inv, err := c.InvokeVM(ctx, vm.ID, ev(event), client.InvokeOptions{}); err != nil || !inv.OK {
			t.Fatalf("invoke: %v %+v", err, inv)
		}
	}
	e.stop()
	// Stopping the daemon stops every VM and frees what it held.
	if !processGone(vm.PID) {
		t.Fatalf("booted VM's QEMU (pid %d) survived the daemon", vm.PID)
	}
	if ents, _ := os.ReadDir(filepath.Join(dataDir, "run")); len(ents) != 0 {
		t.Fatalf("run directory not empty after stop: %v", ents)
	}
	// A VM a crashed daemon left "running" with a process that is gone.
	db, err := catalog.Open(filepath.Join(dataDir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	ghost := &catalog.VM{ID: "vm-00000000dead", Function: "probe", State: catalog.StateRunning, PID: 1 << 22, Accel: "tcg", MemoryMiB: 256,
		RunDir: filepath.Join(dataDir, "run", "vm-00000000dead"), CreatedAt: time.Now()}
	if err := db.PutVM(context.Background(), ghost); err != nil {
		t.Fatal(err)
	}
	db.Close()

	c2 := startEnv(t, dataDir).c
	if _, err := c2.GetFunction(ctx, "probe"); err != nil {
		t.Fatalf("function lost: %v", err)
	}
	if _, err := c2.GetSnapshot(ctx, snap.ID); err != nil {
		t.Fatalf("snapshot lost: %v", err)
	}
	old, err := c2.GetVM(ctx, vm.ID)
	if err != nil || old.State != "stopped" {
		t.Fatalf("booted VM after restart: %+v %v", old, err)
	}
	g, err := c2.GetVM(ctx, ghost.ID)
	if err != nil || g.State != "failed" || !strings.Contains(g.Reason, "gone") {
		t.Fatalf("ghost VM not reconciled: %+v %v", g, err)
	}
	inv, err := c2.InvokeSnapshot(ctx, snap.ID, ev(`{"name":"again"}`), client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("cold invoke after restart: %v %+v", err, inv)
	}
	invs, err := c2.ListInvocations(ctx, "probe", 100)
	if err != nil || len(invs) != 3 {
		t.Fatalf("invocation history after restart: %d records (want 2 before it and 1 after) %v", len(invs), err)
	}
}

// testCorruptSnapshot damages each part of a snapshot in turn and checks the
// restore is refused with a clear message and no VM is left behind.
func testCorruptSnapshot(t *testing.T, c *client.Client, snap *client.Snapshot) {
	ctx := context.Background()
	restoreFile := backupSnapshotFiles(t, snap)
	liveBefore := liveVMs(t, c)
	expectRefused := func(what, contains string) {
		t.Helper()
		_, err := c.InvokeSnapshot(ctx, snap.ID, ev(`{}`), client.InvokeOptions{})
		wantAPIError(t, err, client.ErrSnapshotUnusable, 422, contains)
		if n := liveVMs(t, c); n != liveBefore {
			t.Fatalf("%s: %d live VMs, want %d", what, n, liveBefore)
		}
	}
	mem := filepath.Join(snap.Dir, snapshot.MemoryFile)
	state := filepath.Join(snap.Dir, snapshot.StateFile)
	manifest := filepath.Join(snap.Dir, snapshot.ManifestFile)

	if err := os.Truncate(state, 100); err != nil {
		t.Fatal(err)
	}
	expectRefused("truncated state", "vmstate")
	restoreFile(snapshot.StateFile)

	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	expectRefused("missing manifest", "manifest.json")
	restoreFile(snapshot.ManifestFile)

	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	expectRefused("missing state", "missing")
	restoreFile(snapshot.StateFile)

	// A manifest for other inputs, correctly sealed: the digests must match.
	writeOtherKernelManifest(t, snap.Dir, manifest)
	expectRefused("other kernel", "kernel digest differs")

	// A hand-edited manifest breaks its checksum.
	restoreFile(snapshot.ManifestFile)
	raw, _ := os.ReadFile(manifest)
	if err := os.WriteFile(manifest, []byte(strings.Replace(string(raw), `"memory_mib": 256`, `"memory_mib": 512`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	expectRefused("edited manifest", "checksum")

	restoreFile(snapshot.ManifestFile)
	flipBytes(t, mem, 12345)
	expectRefused("flipped memory bytes", "memory checksum mismatch")
	if _, err := c.VerifySnapshot(ctx, snap.ID); err == nil {
		t.Fatal("verify accepted a corrupt memory file")
	}

	if err := os.Truncate(mem, 4096); err != nil {
		t.Fatal(err)
	}
	expectRefused("truncated memory", "memory is 4096 bytes")

	if err := c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
}

// backupSnapshotFiles copies snap's manifest and device state aside and
// returns a function that puts one of them back.
func backupSnapshotFiles(t *testing.T, snap *client.Snapshot) func(name string) {
	backup := t.TempDir()
	for _, name := range []string{snapshot.ManifestFile, snapshot.StateFile} {
		b, err := os.ReadFile(filepath.Join(snap.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(backup, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return func(name string) {
		b, _ := os.ReadFile(filepath.Join(backup, name))
		if err := os.WriteFile(filepath.Join(snap.Dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// writeOtherKernelManifest writes dir's manifest for another kernel,
// correctly sealed.
func writeOtherKernelManifest(t *testing.T, dir, manifest string) {
	t.Helper()
	m, err := snapshot.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Inputs.Kernel.SHA256 = strings.Repeat("0", 64)
	b, _ := m.Encode()
	if err := os.WriteFile(manifest, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// flipBytes overwrites two bytes of the file at path at off.
func flipBytes(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad}, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func liveVMs(t *testing.T, c *client.Client) int {
	vms, err := c.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vms {
		if v.State == "running" || v.State == "booting" || v.State == "paused" {
			n++
		}
	}
	return n
}

// testDiskFull puts the snapshot directory on a tiny tmpfs, so writing the
// memory file runs out of space half way.
func testDiskFull(t *testing.T, c *client.Client, dataDir, vmID string) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	ctx := context.Background()
	before, err := c.ListSnapshots(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(dataDir, "snapshots")
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=24m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	_, err = c.CreateSnapshot(ctx, vmID)
	var ae *client.APIError
	if err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("snapshot on a full disk: %v", err)
	}
	if ok := errors.As(err, &ae); !ok || ae.Status != 507 {
		t.Fatalf("want 507, got %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("partial snapshot left: %v", ents)
	}
	if after, _ := c.ListSnapshots(ctx, ""); len(after) != len(before) {
		t.Fatalf("catalog has %d snapshots after a failed snapshot, had %d", len(after), len(before))
	}
	if inv, err := c.InvokeVM(ctx, vmID, ev(`{}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("VM not resumed after the failed snapshot: %v %+v", err, inv)
	}
}

// hostService listens on the host's loopback and answers "pong <n>" to each
// line, like a tiny Redis; a function allowed to reach it sees it at
// 10.0.2.2.
func hostService(t testing.TB) int {
	return tcptest.Serve(t, func(conn net.Conn, n int) {
		defer conn.Close()
		line, _ := bufio.NewReader(conn).ReadString('\n')
		fmt.Fprintf(conn, "pong %d %s\n", n, strings.TrimSpace(line))
	}).Port
}

func checkHostService(t *testing.T, c *client.Client, vmID string, port int) {
	t.Helper()
	inv, err := c.InvokeVM(context.Background(), vmID, ev(fmt.Sprintf(`{"op":"tcp","port":%d}`, port)), client.InvokeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !inv.OK || !strings.Contains(string(inv.Result), "pong") || !strings.Contains(string(inv.Result), "ping") {
		t.Fatalf("guest could not reach the host service: %s %+v", inv.Result, inv.Error)
	}
}

// The guest keeps time at the host's rate, booted and restored: its kernel
// takes the host's TSC frequency from the command line instead of
// calibrating it (a guest that calibrated on a busy host once ran its
// clock 3.7 times too fast in every clone of its snapshot).
func TestGuestClockRate(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	khz, err := tsc.MeasureKHz(20 * time.Millisecond)
	if errors.Is(err, tsc.ErrUnsupported) {
		t.Skipf("no invariant TSC on this host: guests calibrate their own clock (%v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil || math.Abs(float64(info.TSCKHz-khz)) > float64(khz)/1000 {
		t.Fatalf("info says the guests' TSC is %d kHz (%v); measured here %d", info.TSCKHz, err, khz)
	}
	type clock struct {
		Cmdline string  `json:"cmdline"`
		MHz     float64 `json:"mhz"`
		Slept   float64 `json:"slept_s"`
	}
	check := func(what string, inv *client.Invocation, err error, host time.Duration) {
		t.Helper()
		var got clock
		if err != nil || !inv.OK || json.Unmarshal(inv.Result, &got) != nil {
			t.Fatalf("%s: %v %+v", what, err, inv)
		}
		var given int
		for _, w := range strings.Fields(got.Cmdline) {
			if v, ok := strings.CutPrefix(w, "tsc_early_khz="); ok {
				given, _ = strconv.Atoi(v)
			}
		}
		if given != info.TSCKHz || math.Abs(got.MHz*1000-float64(khz)) > float64(khz)/100 {
			t.Errorf("%s: guest told %d kHz, shows %.3f MHz; host TSC %d kHz", what, given, got.MHz, khz)
		}
		// 2 s of guest time took about 2 s of the host's (the invocation
		// adds its own round trip, never subtracts).
		if host < 1950*time.Millisecond || got.Slept < 1.99 || got.Slept > 2.2 {
			t.Errorf("%s: the guest slept %.3f s by its clock in %s of the host's", what, got.Slept, host)
		}
		t.Logf("%s: %.3f MHz, slept %.3f s in %s", what, got.MHz, got.Slept, host.Round(time.Millisecond))
	}
	t0 := time.Now()
	inv, err := c.InvokeVM(ctx, f.vm.ID, ev(`{"op":"clock","seconds":2}`), client.InvokeOptions{})
	check("booted", inv, err, time.Since(t0))
	t0 = time.Now()
	inv, err = c.InvokeSnapshot(ctx, f.snap.ID, ev(`{"op":"clock","seconds":2}`), client.InvokeOptions{})
	check("restored", inv, err, time.Since(t0))
}
