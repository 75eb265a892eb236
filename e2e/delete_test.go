package e2e

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// invokeLater starts an invocation of event on vm in the background and
// waits until the VM serves it (GET /v1/vms/{id} shows it).
func invokeLater(t *testing.T, e *env, vm, event string, timeout time.Duration) (<-chan error, *client.RunningInvocation) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		inv, err := e.c.InvokeVM(context.Background(), vm, ev(event), client.InvokeOptions{Timeout: timeout})
		if err == nil && !inv.OK {
			err = inv.Error
		}
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := e.c.GetVM(ctxT(t), vm)
		if err != nil {
			t.Fatal(err)
		}
		if v.Invocation != nil {
			return done, v.Invocation
		}
		if time.Now().After(deadline) {
			t.Fatalf("vm %s shows no invocation", vm)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// thawCLI runs bin/thaw against e's daemon and returns its exit code,
// stdout and stderr.
func thawCLI(t *testing.T, e *env, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(repoPath("bin/thaw"), args...)
	cmd.Env = []string{"THAW_URL=" + e.srv.URL, "THAW_TOKEN=" + e.token, "PATH=/usr/bin:/bin"}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run bin/thaw (make build first): %v", err)
	}
	t.Logf("thaw %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

// thaw vm delete on a VM serving an invocation says what it waits for
// and deletes it when the invocation ends; --force kills the VM at once,
// and its invocation fails naming the delete and is recorded.
func TestVMDeleteWaitsOrForces(t *testing.T) {
	parallel(t)
	e := startEnv(t, t.TempDir())
	ctx := ctxT(t)
	vm := bootFunction(t, e.c, "sleep", "functions/sleep")
	done, running := invokeLater(t, e, vm.ID, `{"seconds": 6}`, time.Minute)
	if running.TimeoutMS != 60000 {
		t.Errorf("running invocation %+v", running)
	}
	code, stdout, stderr := thawCLI(t, e, "vm", "delete", vm.ID)
	if code != 0 || !strings.Contains(stdout, "deleted vm "+vm.ID) ||
		!strings.Contains(stderr, "vm "+vm.ID+": waiting for invocation "+running.ID+" (running ") ||
		!strings.Contains(stderr, "timeout 60 s); --force kills the VM now") {
		t.Fatalf("vm delete while an invocation runs: exit %d", code)
	}
	if err := <-done; err != nil {
		t.Fatalf("the invocation the delete waited for: %v", err)
	}
	if _, err := e.c.GetVM(ctx, vm.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("deleted vm: %v", err)
	}

	vm, err := e.c.BootVM(ctx, "sleep")
	if err != nil {
		t.Fatal(err)
	}
	done, running = invokeLater(t, e, vm.ID, `{"seconds": 600}`, 700*time.Second)
	time.Sleep(2 * time.Second) // well into the handler
	t0 := time.Now()
	code, _, stderr = thawCLI(t, e, "vm", "delete", "--force", vm.ID)
	took := time.Since(t0)
	if code != 0 || !strings.Contains(stderr, "vm "+vm.ID+" was killed during invocation "+running.ID) {
		t.Fatalf("vm delete --force: exit %d", code)
	}
	t.Logf("thaw vm delete --force during a 600 s invocation took %s", took)
	if took > 20*time.Second {
		t.Errorf("a forced delete took %s", took)
	}
	err = <-done
	wantAPIError(t, err, client.ErrConflict, 409, "deleted with force")
	if !strings.Contains(err.Error(), vm.ID) {
		t.Errorf("the error does not name the vm: %v", err)
	}
	if !processGone(vm.PID) {
		t.Errorf("qemu %d lives on", vm.PID)
	}
	recs, err := e.c.ListInvocations(ctx, "sleep", 10)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(recs, func(r client.InvocationRecord) bool { return r.ID == running.ID })
	if i < 0 || recs[i].OK || recs[i].Detail.Error == nil || recs[i].Detail.Error.Type != "VMDeleted" {
		t.Fatalf("the killed invocation's record: %+v", recs)
	}
}

// A function with a booted VM running an invocation, a VM kept idle by
// keep-alive, a standby VM of the VMM pool, two snapshots (one pinned)
// and a deployed version: the plain delete lists all of it at once and
// changes nothing; --cascade deletes it all in one step.
func TestFunctionDeleteCascade(t *testing.T) {
	parallel(t)
	dataDir := t.TempDir()
	e := startEnv(t, dataDir)
	ctx := ctxT(t)
	dep, err := e.c.DeployFromDir(ctx, "sleep", repoPath("functions/sleep"), client.DeployRequest{})
	if err != nil {
		t.Fatal(err)
	}
	booted, err := e.c.BootVM(ctx, "sleep")
	if err != nil {
		t.Fatal(err)
	}
	byHand, err := e.c.CreateSnapshot(ctx, booted.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.PinSnapshot(ctx, byHand.ID); err != nil {
		t.Fatal(err)
	}
	cold, err := e.c.InvokeFunction(ctx, "sleep", ev(`{"seconds": 0}`), client.InvokeOptions{})
	if err != nil || !cold.OK || cold.Version != dep.Version {
		t.Fatalf("cold invocation: %v %+v", err, cold)
	}
	standby := waitStandby(t, e.c, dep.Snapshots[0], cold.Strategy)
	done, running := invokeLater(t, e, booted.ID, `{"seconds": 600}`, 700*time.Second)
	before := functionPIDs(t, e, "sleep")
	if len(before) != 3 {
		t.Fatalf("want 3 live VMs of the function, have %v", before)
	}

	_, err = e.c.DeleteFunctionWith(ctx, "sleep", client.DeleteFunctionOptions{})
	wantAPIError(t, err, client.ErrConflict, 409, "--cascade")
	for _, want := range []string{booted.ID + " running an invocation", cold.VM + " kept idle", standby + " standby in the VMM pool",
		"2 snapshots", byHand.ID + " pinned", dep.Snapshots[0], "1 version (1) and 1 alias"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q", want)
		}
	}
	if after := functionPIDs(t, e, "sleep"); len(after) != 3 {
		t.Fatalf("a refused delete stopped VMs: %v", after)
	}

	t0 := time.Now()
	res, err := e.c.DeleteFunctionWith(ctx, "sleep", client.DeleteFunctionOptions{Cascade: true})
	if err != nil {
		t.Fatalf("cascade: %v", err)
	}
	t.Logf("cascade took %s (daemon %.1f ms): %+v", time.Since(t0), res.MS, res)
	var ids []string
	for _, v := range res.VMs {
		ids = append(ids, v.ID)
	}
	for _, id := range []string{booted.ID, cold.VM, standby} {
		if !slices.Contains(ids, id) {
			t.Errorf("vm %s not in what went: %v", id, ids)
		}
	}
	if i := slices.IndexFunc(res.VMs, func(v client.DeletedVM) bool { return v.ID == booted.ID }); i < 0 || res.VMs[i].Invocation != running.ID {
		t.Errorf("the killed invocation %s is not named: %+v", running.ID, res.VMs)
	}
	if len(res.Snapshots) != 2 || !slices.Equal(res.Versions, []int{1}) || !slices.Equal(res.Aliases, []string{"live"}) {
		t.Errorf("cascade removed %+v", res)
	}
	wantAPIError(t, <-done, client.ErrConflict, 409, "deleted with its function")
	for _, pid := range before {
		if !processGone(pid) {
			t.Errorf("qemu %d lives on", pid)
		}
	}
	checkNothingLeft(t, e, dataDir, "sleep")
	_, err = e.c.DeleteFunctionWith(ctx, "sleep", client.DeleteFunctionOptions{Cascade: true})
	wantAPIError(t, err, client.ErrNotFound, 404, "")
}

// functionPIDs are the QEMU pids of function's live VMs.
func functionPIDs(t *testing.T, e *env, function string) []int {
	t.Helper()
	vms, err := e.c.ListVMs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, v := range vms {
		if v.Function == function && v.PID > 0 {
			pids = append(pids, v.PID)
		}
	}
	return pids
}

// checkNothingLeft fails t if anything of function is left: VMs,
// snapshots (records, directories), versions or code.
func checkNothingLeft(t *testing.T, e *env, dataDir, function string) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := e.c.GetFunction(ctx, function); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("function: %v", err)
	}
	vms, err := e.c.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.Function == function {
			t.Errorf("vm left: %+v", v)
		}
	}
	if snaps, err := e.c.ListSnapshots(ctx, ""); err != nil || len(snaps) > 0 {
		t.Errorf("snapshots left: %v %v", snaps, err)
	}
	for _, pattern := range []string{"snapshots/snap-*", "functions/" + function + "-*", "run/vm-*"} {
		if left, _ := filepath.Glob(filepath.Join(dataDir, pattern)); len(left) > 0 {
			t.Errorf("left in the data directory: %v", left)
		}
	}
	if _, err := e.c.ListVersions(ctx, function); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("versions: %v", err)
	}
}
