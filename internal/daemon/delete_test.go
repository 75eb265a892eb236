package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/logtest"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// invoked is what an invocation started in the background returned.
type invoked struct {
	inv *Invocation
	err error
}

// invokeInBackground starts an invocation of event on vm and waits until
// the VM serves it.
func invokeInBackground(t *testing.T, s *Service, vm, event string, timeout time.Duration) (<-chan invoked, *wire.RunningInvocation) {
	t.Helper()
	done := make(chan invoked, 1)
	go func() {
		inv, err := s.InvokeVM(context.Background(), vm, InvokeRequest{Event: json.RawMessage(event), Timeout: timeout})
		done <- invoked{inv, err}
	}()
	waitFor(t, 5*time.Second, "the invocation to run", func() bool { return s.RunningInvocation(vm) != nil })
	return done, s.RunningInvocation(vm)
}

// noErrorLogged fails t if the daemon logged an error.
func noErrorLogged(t *testing.T, logs *logtest.Buffer) {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("daemon logged an error: %s", line)
		}
	}
}

// bootedEcho is a fake service that logs to a buffer, with one VM booted
// for function echo.
func bootedEcho(t *testing.T) (*Service, *catalog.VM, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	s, _ := fakeServiceLog(t, nil, logs)
	createFn(t, s, "echo")
	vm, err := s.BootVM(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	return s, vm, logs
}

// A delete of a VM serving an invocation waits for it (the VM shows what
// it serves) and refuses new invocations meanwhile; the invocation
// finishes normally.
func TestDeleteVMWaitsForItsInvocation(t *testing.T) {
	s, vm, logs := bootedEcho(t)
	ctx := context.Background()
	inv, running := invokeInBackground(t, s, vm.ID, `{"op":"sleep","ms":1500}`, 10*time.Second)
	if !strings.HasPrefix(running.ID, "inv-") || running.TimeoutMS != 10000 || running.RunningMS < 0 {
		t.Fatalf("running invocation %+v", running)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- s.DeleteVM(ctx, vm.ID) }()
	lv, _ := s.vms.Live(vm.ID)
	waitFor(t, 5*time.Second, "the delete to begin", lv.Deleting.Load)
	if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`1`)}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("an invocation while the delete waits: %v", err)
	}
	select {
	case err := <-deleted:
		t.Fatalf("the delete did not wait for the invocation: %v", err)
	case r := <-inv:
		if r.err != nil || !r.inv.OK || r.inv.ID != running.ID {
			t.Fatalf("the invocation the delete waited for: %v %+v", r.err, r.inv)
		}
	}
	if err := <-deleted; err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := s.GetVM(ctx, vm.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted vm: %v", err)
	}
	if !processGone(vm.PID) {
		t.Errorf("the vm's process %d lives on", vm.PID)
	}
	noErrorLogged(t, logs)
}

// A forced delete kills the VM at once: its invocation fails with an
// error naming the delete and is recorded, failed.
func TestDeleteVMForceKillsItsInvocation(t *testing.T) {
	s, vm, logs := bootedEcho(t)
	ctx := context.Background()
	inv, running := invokeInBackground(t, s, vm.ID, `{"op":"hang"}`, time.Minute)
	t0 := time.Now()
	if err := s.DeleteVMForce(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("a forced delete took %s", took)
	}
	r := <-inv
	if !errors.Is(r.err, ErrConflict) || !strings.Contains(r.err.Error(), "vm "+vm.ID) || !strings.Contains(r.err.Error(), "deleted with force") ||
		!strings.Contains(r.err.Error(), "did not finish") {
		t.Fatalf("the killed invocation's error: %v", r.err)
	}
	recs, err := s.ListInvocations(ctx, "echo", 10, time.Time{}, "")
	if err != nil || len(recs) != 1 {
		t.Fatalf("history: %d records, %v", len(recs), err)
	}
	var detail wire.Invocation
	if err := json.Unmarshal(recs[0].Detail, &detail); err != nil {
		t.Fatal(err)
	}
	if recs[0].ID != running.ID || recs[0].OK || detail.Error == nil || detail.Error.Type != VMDeletedError ||
		!strings.Contains(detail.Error.Message, "deleted with force") {
		t.Fatalf("recorded: %+v %+v", recs[0], detail.Error)
	}
	if _, err := s.GetVM(ctx, vm.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted vm: %v", err)
	}
	if !processGone(vm.PID) {
		t.Errorf("the vm's process %d lives on", vm.PID)
	}
	// An idle VM goes the same way; a second delete finds nothing.
	idle, err := s.BootVM(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVMForce(ctx, idle.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVMForce(ctx, idle.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	noErrorLogged(t, logs)
}

// A VM deleted while its VMM starts (a standby VM of the VMM pool being
// filled) stays deleted: the delete waits for the start, and the VM does
// not come back.
func TestDeleteStartingVMStaysDeleted(t *testing.T) {
	logs := &logtest.Buffer{}
	s, b := fakeServiceLog(t, func(c *Config) { c.KeepAlive, c.VMMPoolTTL = -1, time.Minute }, logs)
	ctx := context.Background()
	booted, snap := bootAndSnapshot(t, s, "echo")
	if err := s.DeleteVM(ctx, booted.ID); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	b.SetStart(func(spec vmm.Spec) error {
		if !spec.Memory.Shared { // a restore's VMM
			<-hold
		}
		return nil
	})
	fn, err := s.GetFunction(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	s.vmmPool.Refill(poolKey{Snapshot: snap.ID, Kind: restore.Vanilla}, fn)
	var starting *catalog.VM
	waitFor(t, 5*time.Second, "a standby vm starting", func() bool {
		vms, _ := s.ListVMs(ctx)
		for _, v := range vms {
			if v.Snapshot == snap.ID && v.State == catalog.StateBooting {
				starting = v
				return true
			}
		}
		return false
	})
	deleted := make(chan error, 1)
	go func() { deleted <- s.DeleteVM(ctx, starting.ID) }()
	time.Sleep(200 * time.Millisecond)
	close(hold)
	if err := <-deleted; err != nil {
		t.Fatalf("delete a starting vm: %v", err)
	}
	for range 10 {
		if v, err := s.GetVM(ctx, starting.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the deleted vm came back: %+v %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := s.DeleteFunctionWith(ctx, "echo", true); err != nil {
		t.Fatal(err)
	}
	noErrorLogged(t, logs)
}

// A VM that something else forgot first (a delete racing an eviction or
// the end of a cold invocation) is retired quietly.
func TestRetireForgottenVMIsQuiet(t *testing.T) {
	s, vm, logs := bootedEcho(t)
	ctx := context.Background()
	lv, _ := s.vms.Live(vm.ID)
	if err := s.db.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	s.retire(ctx, lv, vm, "keep-alive time over")
	if _, ok := s.vms.Live(vm.ID); ok || !processGone(vm.PID) {
		t.Errorf("retired vm still live")
	}
	noErrorLogged(t, logs)
}

// deployEcho deploys function name with an echo handler.
func deployEcho(t *testing.T, s *Service, name string) *DeployResult {
	t.Helper()
	res, err := s.Deploy(context.Background(), DeploySpec{FunctionSpec: FunctionSpec{Name: name,
		Archive: bytes.NewReader(archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: "def handle(e): return e\n"}))}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Deleting a function that everything uses: without cascade the refusal
// lists it all at once and changes nothing; with cascade one request
// removes it all (a running invocation fails naming the delete), and a
// second delete finds nothing, quietly.
func TestDeleteFunctionCascade(t *testing.T) {
	logs := &logtest.Buffer{}
	s, _ := fakeServiceLog(t, func(c *Config) { c.KeepAlive, c.VMMPoolTTL, c.MaxVMs = time.Minute, time.Minute, 8 }, logs)
	ctx := context.Background()
	dep := deployEcho(t, s, "echo") // version 1, live, its snapshot
	booted, byHand := snapshotOf(t, s, "echo")
	if _, err := s.PinSnapshot(ctx, byHand.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StoreSnapshot(ctx, byHand.ID); err != nil {
		t.Fatal(err)
	}
	cold, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}})
	if err != nil || cold.Mode != "cold" || cold.Version != 1 {
		t.Fatalf("cold invocation: %v %+v", err, cold)
	}
	waitFor(t, 5*time.Second, "a standby vm", func() bool { return standbyOf(t, s, dep.Snapshots[0]) != nil })
	standby := standbyOf(t, s, dep.Snapshots[0])
	inv, running := invokeInBackground(t, s, booted.ID, `{"op":"hang"}`, time.Minute)

	err = s.DeleteFunction(ctx, "echo")
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("delete without cascade: %v", err)
	}
	for _, want := range []string{booted.ID + " running an invocation", cold.VM + " kept idle", standby.ID + " standby in the VMM pool",
		"3 VMs", "2 snapshots", dep.Snapshots[0], byHand.ID + " pinned", "1 version (1) and 1 alias", "--cascade"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	for _, id := range []string{booted.ID, cold.VM, standby.ID} {
		if v, err := s.GetVM(ctx, id); err != nil || !v.Live() {
			t.Errorf("a refused delete touched vm %s: %+v %v", id, v, err)
		}
	}
	if ids := snapshotIDs(t, s, "echo"); len(ids) != 2 {
		t.Errorf("a refused delete touched the snapshots: %v", ids)
	}

	res, err := s.DeleteFunctionWith(ctx, "echo", true)
	if err != nil {
		t.Fatalf("cascade: %v", err)
	}
	wantVM := func(id string, match func(wire.DeletedVM) bool) {
		t.Helper()
		if i := slices.IndexFunc(res.VMs, func(v wire.DeletedVM) bool { return v.ID == id }); i < 0 || !match(res.VMs[i]) {
			t.Errorf("vm %s in %+v", id, res.VMs)
		}
	}
	wantVM(booted.ID, func(v wire.DeletedVM) bool { return v.Invocation == running.ID && v.State == catalog.StateRunning })
	wantVM(cold.VM, func(v wire.DeletedVM) bool { return v.Kept })
	wantVM(standby.ID, func(v wire.DeletedVM) bool { return v.State == catalog.StateStandby })
	if len(res.VMs) != 3 || len(res.Snapshots) != 2 || !slices.Equal(res.Versions, []int{1}) || !slices.Equal(res.Aliases, []string{"live"}) ||
		res.CodeDirs < 1 {
		t.Errorf("cascade removed %+v", res)
	}
	for _, sn := range res.Snapshots {
		if sn.ID == byHand.ID && (!sn.Pinned || !sn.Stored) || sn.ID == dep.Snapshots[0] && sn.Version != 1 {
			t.Errorf("snapshot %+v", sn)
		}
	}
	if r := <-inv; !errors.Is(r.err, ErrConflict) || !strings.Contains(r.err.Error(), "deleted with its function") {
		t.Errorf("the running invocation: %v", r.err)
	}
	checkFunctionGone(t, s, "echo", []string{booted.ID, cold.VM, standby.ID}, []*catalog.Snapshot{byHand})
	if _, err := s.DeleteFunctionWith(ctx, "echo", true); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	noErrorLogged(t, logs)
	// The name is free again.
	createFn(t, s, "echo")
	if _, err := s.BootVM(ctx, "echo"); err != nil {
		t.Fatalf("boot the new echo: %v", err)
	}
}

// checkFunctionGone fails t if anything of function is left: its record,
// versions, VMs (and their processes), snapshots, memory store copies or
// code.
func checkFunctionGone(t *testing.T, s *Service, name string, vms []string, snaps []*catalog.Snapshot) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GetFunction(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Errorf("function: %v", err)
	}
	if vs, err := s.db.ListVersions(ctx, name); err != nil || len(vs) > 0 {
		t.Errorf("versions left: %d %v", len(vs), err)
	}
	all, _ := s.db.ListVMs(ctx)
	if left := slices.DeleteFunc(all, func(v *catalog.VM) bool { return v.Function != name }); len(left) > 0 {
		t.Errorf("vms left: %+v", left)
	}
	if len(s.liveOf(name)) > 0 {
		t.Errorf("live vms left")
	}
	for _, id := range vms {
		if _, err := s.GetVM(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("vm %s: %v", id, err)
		}
	}
	if ids := snapshotIDs(t, s, name); len(ids) > 0 {
		t.Errorf("snapshots left: %v", ids)
	}
	for _, sn := range snaps {
		if _, err := os.Stat(sn.Dir); !os.IsNotExist(err) {
			t.Errorf("snapshot directory %s: %v", sn.Dir, err)
		}
		if _, err := s.snaps.Store().Get(sn.ID); err == nil {
			t.Errorf("memory store copy of %s left", sn.ID)
		}
	}
	if code, _ := filepath.Glob(filepath.Join(s.functionsDir(), name+"-*")); len(code) > 0 {
		t.Errorf("code left: %v", code)
	}
}

// A delete refuses while the function is being deployed, and no VM of a
// function being deleted starts.
func TestDeleteFunctionGuards(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	createFn(t, s, "echo")
	release, err := s.lifecycle.ClaimDeploy("echo") // a deploy under way
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteFunctionWith(ctx, "echo", true); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "deployed") {
		t.Fatalf("delete during a deploy: %v", err)
	}
	release()
	end, err := s.lifecycle.BeginDelete("echo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.BootVM(ctx, "echo"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("boot during a delete: %v", err)
	}
	if _, err := s.DeleteFunctionWith(ctx, "echo", true); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("a second delete during a delete: %v", err)
	}
	end()
	// A function nothing uses goes without cascade, and says what went.
	res, err := s.DeleteFunctionWith(ctx, "echo", false)
	if err != nil || res.Function != "echo" || res.CodeDirs != 1 || len(res.VMs)+len(res.Snapshots)+len(res.Versions) != 0 {
		t.Fatalf("delete an unused function: %+v %v", res, err)
	}
}

// processGone says whether process pid has exited (a zombie counts).
func processGone(pid int) bool {
	return procstat.Exited(pid)
}
