package lifecycle

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// inUse gives function echo everything a function can be used by: a VM
// serving an invocation, one kept idle, a standby, the record of one that
// stopped, a version with its live alias, a snapshot of it in the memory
// store and a pinned one. Function other has a VM and a snapshot too.
func inUse(t *testing.T, f *fakeDaemon) *catalog.Function {
	t.Helper()
	fn := f.function("echo")
	f.version(fn, 1)
	f.vm("echo", "vm-run", catalog.StateRunning, "inv-1", true)
	f.vm("echo", "vm-kept", catalog.StateReady, "", true)
	f.kept["vm-kept"] = true
	f.vm("echo", "vm-standby", catalog.StateStandby, "", true)
	f.vm("echo", "vm-dead", catalog.StateStopped, "", false)
	f.snapshot("echo", "snap-v1", 1, false, true)
	f.snapshot("echo", "snap-pin", 0, true, false)
	f.function("other")
	f.vm("other", "vm-other", catalog.StateReady, "", true)
	f.snapshot("other", "snap-other", 0, false, false)
	return fn
}

// Without cascade a delete of a function in use is refused, listing all
// that uses it at once, and changes nothing; a function nothing uses
// goes, saying what went.
func TestDeleteRefusedWhileInUse(t *testing.T) {
	m, f := newFake(t)
	ctx := context.Background()
	inUse(t, f)
	err := m.DeleteFunction(ctx, "echo")
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("delete in use: %v", err)
	}
	for _, want := range []string{"vm-run running an invocation", "vm-kept kept idle", "vm-standby standby in the VMM pool", "3 VMs",
		"2 snapshots", "snap-v1", "snap-pin pinned", "1 version (1) and 1 alias", "--cascade"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "vm-dead") || strings.Contains(err.Error(), "other") {
		t.Errorf("the refusal names what does not use echo: %v", err)
	}
	if len(f.ended)+len(f.dropped)+len(f.deleted)+f.kicks > 0 {
		t.Errorf("a refused delete acted: ended %v, dropped %v, snapshots %v, kicks %d", f.ended, f.dropped, f.deleted, f.kicks)
	}
	if _, err := f.db.GetFunction(ctx, "echo"); err != nil {
		t.Errorf("a refused delete removed the function: %v", err)
	}
	if m.Deleting("echo") {
		t.Error("still deleting after the refusal")
	}
	// A long list says how many more there are.
	f.function("many")
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
		f.snapshot("many", id, 0, false, false)
	}
	if err := m.DeleteFunction(ctx, "many"); err == nil || !strings.Contains(err.Error(), "7 snapshots") || !strings.Contains(err.Error(), "and 2 more") {
		t.Errorf("seven snapshots: %v", err)
	}
	spare := f.function("spare")
	res, err := m.DeleteFunctionWith(ctx, "spare", false)
	if err != nil || res.Function != "spare" || res.CodeDirs != 1 || len(res.VMs)+len(res.Snapshots)+len(res.Versions)+len(res.Aliases) != 0 {
		t.Fatalf("delete an unused function: %+v %v", res, err)
	}
	if _, err := os.Stat(spare.CodeDir); !os.IsNotExist(err) {
		t.Errorf("its code: %v", err)
	}
	if _, err := m.DeleteFunctionWith(ctx, "spare", false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

// With cascade a delete stops every VM of the function (pooled ones are
// retired first), deletes its snapshots, pinned ones too, then its
// versions, aliases and code; what went is in the answer, and nothing of
// another function is touched.
func TestCascadeDeleteStopsVMsAndRemovesSnapshots(t *testing.T) {
	m, f := newFake(t)
	ctx := context.Background()
	fn := inUse(t, f)
	v1 := fn.CodeDir
	v2 := f.version(fn, 2).Config.CodeDir // the function's code is version 2's now
	res, err := m.DeleteFunctionWith(ctx, "echo", true)
	if err != nil {
		t.Fatal(err)
	}
	wantVMs := []wire.DeletedVM{{ID: "vm-dead", State: catalog.StateStopped}, {ID: "vm-kept", State: catalog.StateReady, Kept: true},
		{ID: "vm-run", State: catalog.StateRunning, Invocation: "inv-1"}, {ID: "vm-standby", State: catalog.StateStandby}}
	got := slices.Clone(res.VMs)
	slices.SortFunc(got, func(a, b wire.DeletedVM) int { return strings.Compare(a.ID, b.ID) })
	if !slices.Equal(got, wantVMs) {
		t.Errorf("vms %+v, want %+v", got, wantVMs)
	}
	slices.Sort(f.ended)
	if !slices.Equal(f.ended, []string{"vm-kept", "vm-run", "vm-standby"}) || !slices.Equal(f.dropped, []string{"echo"}) {
		t.Errorf("ended %v, pools dropped %v", f.ended, f.dropped)
	}
	wantSnaps := map[string]wire.DeletedSnapshot{"snap-v1": {ID: "snap-v1", Version: 1, Stored: true}, "snap-pin": {ID: "snap-pin", Pinned: true}}
	if len(res.Snapshots) != 2 {
		t.Errorf("snapshots %+v", res.Snapshots)
	}
	for _, sn := range res.Snapshots {
		if sn != wantSnaps[sn.ID] {
			t.Errorf("snapshot %+v, want %+v", sn, wantSnaps[sn.ID])
		}
	}
	if !slices.Equal(res.Versions, []int{1, 2}) || !slices.Equal(res.Aliases, []string{"live"}) || res.CodeDirs != 2 {
		t.Errorf("versions %v, aliases %v, code dirs %d", res.Versions, res.Aliases, res.CodeDirs)
	}
	if f.kicks != 1 || !slices.Equal(f.cleared, []string{"echo:1", "echo:2"}) {
		t.Errorf("layer collections %d, stale notes cleared %v", f.kicks, f.cleared)
	}
	checkGone(t, f, "echo", []string{v1, v2})
	if _, err := f.db.GetVM(ctx, "vm-other"); err != nil {
		t.Errorf("another function's vm: %v", err)
	}
	if snaps, _ := f.db.ListSnapshots(ctx, "other"); len(snaps) != 1 {
		t.Errorf("another function's snapshots: %v", snaps)
	}
	if !f.gate("echo").TryLock() || m.Deleting("echo") {
		t.Error("the delete left the function's gate held or its name marked")
	}
}

// checkGone fails t if anything of function is left in the catalog, or
// any of its code directories.
func checkGone(t *testing.T, f *fakeDaemon, name string, codeDirs []string) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.db.GetFunction(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("function: %v", err)
	}
	vs, _ := f.db.ListVersions(ctx, name)
	as, _ := f.db.ListAliases(ctx, name)
	sn, _ := f.db.ListSnapshots(ctx, name)
	vms, _ := f.db.ListVMs(ctx)
	vms = slices.DeleteFunc(vms, func(v *catalog.VM) bool { return v.Function != name })
	if len(vs)+len(as)+len(sn)+len(vms) > 0 {
		t.Errorf("left: %d versions, %d aliases, %d snapshots, vms %+v", len(vs), len(as), len(sn), vms)
	}
	for _, d := range codeDirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("code %s: %v", d, err)
		}
	}
}

// Forget removes the function's record, versions, aliases and code, and
// leaves its VMs and snapshots to whoever cleared them.
func TestForget(t *testing.T) {
	m, f := newFake(t)
	ctx := context.Background()
	fn := f.function("echo")
	f.version(fn, 1)
	f.snapshot("echo", "snap-v1", 1, false, false)
	if err := m.Forget(ctx, "echo"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.GetFunction(ctx, "echo"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("function: %v", err)
	}
	if vs, _ := f.db.ListVersions(ctx, "echo"); len(vs) > 0 {
		t.Errorf("versions left: %v", vs)
	}
	if _, err := os.Stat(fn.CodeDir); !os.IsNotExist(err) {
		t.Errorf("code: %v", err)
	}
	if _, err := f.db.GetSnapshot(ctx, "snap-v1"); err != nil || len(f.deleted) > 0 {
		t.Errorf("forget touched the snapshot: %v %v", err, f.deleted)
	}
	if err := m.Forget(ctx, "echo"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("forget a forgotten function: %v", err)
	}
}
