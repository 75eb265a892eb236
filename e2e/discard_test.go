package e2e

import (
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// TestFreedPagesKeepSnapshotIntact: a restored guest that frees memory
// reports it (virtio-balloon free page reporting) and QEMU 7.2 discards it
// by punching holes into the RAM block's file, private mapping or not. The
// interposer must keep the snapshot's memory file (and premap's store copy)
// intact, or every later clone restores zeroed pages. Found by the
// memory-per-clone benchmark: the snapshot's checksum stopped matching.
func TestFreedPagesKeepSnapshotIntact(t *testing.T) {
	parallel(t)
	e := startEnv(t, t.TempDir())
	c := e.c
	ctx := ctxT(t)
	snap, _ := storedProbe(t, c)
	for _, strategy := range []string{"vanilla", "premap"} {
		v := restoreVM(t, c, snap.ID, strategy)
		// Allocate and free 48 MiB, then give free page reporting (2 s
		// delay) time to report it and QEMU time to discard it.
		inv, err := c.InvokeVM(ctx, v.ID, ev(`{"op":"write","mib":48}`), client.InvokeOptions{})
		if err != nil || !inv.OK {
			t.Fatalf("%s: write: %v %+v", strategy, err, inv)
		}
		time.Sleep(5 * time.Second)
		if err := c.DeleteVM(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.VerifySnapshot(ctx, snap.ID); err != nil {
			t.Fatalf("after a %s clone freed memory: %v", strategy, err)
		}
		st, err := c.Store(ctx)
		if err != nil || len(st.Entries) != 1 {
			t.Fatalf("store: %+v %v", st, err)
		}
		// The store copy is re-hashed by the next premap restore; a
		// damaged one would make it fall back.
		inv, err = c.InvokeSnapshot(ctx, snap.ID, ev(`{"op":"hello"}`), client.InvokeOptions{Strategy: "premap"})
		if err != nil || inv.Strategy != "premap" {
			t.Fatalf("premap after a %s clone freed memory: %v %+v", strategy, err, inv)
		}
	}
}

// probeSnapshot creates the probe function (256 MiB, 1 vCPU), boots it,
// snapshots it and deletes the booted VM.
func probeSnapshot(t *testing.T, c *client.Client) *client.Snapshot {
	t.Helper()
	vm, snap := bootSnapshot(t, c, "probe", "e2e/testdata/probe")
	if err := c.DeleteVM(ctxT(t), vm.ID); err != nil {
		t.Fatal(err)
	}
	return snap
}

// storedProbe is probeSnapshot with the snapshot's memory also copied into
// the daemon's memory store.
func storedProbe(t *testing.T, c *client.Client) (*client.Snapshot, *client.StoreEntry) {
	t.Helper()
	snap := probeSnapshot(t, c)
	entry, err := c.StoreSnapshot(ctxT(t), snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	return snap, entry
}

// createFunction creates function name from the repository directory dir
// (256 MiB, 1 vCPU).
func createFunction(t *testing.T, c *client.Client, name, dir string) {
	t.Helper()
	if _, err := c.CreateFunctionFromDir(ctxT(t), name, repoPath(dir), 256, 1); err != nil {
		t.Fatal(err)
	}
}

// bootFunction creates function name from the repository directory dir
// (256 MiB, 1 vCPU) and boots it.
func bootFunction(t *testing.T, c *client.Client, name, dir string) *client.VM {
	t.Helper()
	createFunction(t, c, name, dir)
	vm, err := c.BootVM(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// helloSnapshot creates the bundled hello with memMiB of guest memory,
// boots it, snapshots it and deletes the VM (an idle guest still costs TCG
// time), leaving the snapshot.
func helloSnapshot(t *testing.T, c *client.Client, memMiB int) *client.Snapshot {
	t.Helper()
	ctx := ctxT(t)
	if _, err := c.CreateFunctionFromDir(ctx, "hello", repoPath("functions/hello"), memMiB, 1); err != nil {
		t.Fatal(err)
	}
	vm, snap := snapshotBoot(t, c, "hello")
	if err := c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	return snap
}

// restoreVM restores a running VM from snapshot id with strategy.
func restoreVM(t *testing.T, c *client.Client, id, strategy string) *client.VM {
	t.Helper()
	v, err := c.RestoreVM(ctxT(t), id, strategy)
	if err != nil {
		t.Fatalf("restore %s (%s): %v", id, strategy, err)
	}
	return v
}

// bootSnapshot creates function name from the repository directory dir
// (256 MiB, 1 vCPU), boots it and snapshots the VM, which keeps running.
func bootSnapshot(t *testing.T, c *client.Client, name, dir string) (*client.VM, *client.Snapshot) {
	t.Helper()
	createFunction(t, c, name, dir)
	return snapshotBoot(t, c, name)
}

// snapshotBoot boots a VM of the function and snapshots it; the VM keeps
// running.
func snapshotBoot(t *testing.T, c *client.Client, function string) (*client.VM, *client.Snapshot) {
	t.Helper()
	ctx := ctxT(t)
	vm, err := c.BootVM(ctx, function)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	return vm, snap
}
