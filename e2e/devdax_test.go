package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// TestPremapDevDAX: premap from a device-DAX store on real VMs. No host of
// ours has persistent memory, so a 1 GiB file on /dev/shm stands in for
// /dev/daxX.Y (thawd --store-device-file, store.OpenDeviceFile: the same allocator, index, clone ranges
// and shared mappings; scripts/dax-guest.sh runs the store and the
// interposer on a real device-DAX device inside a guest). Each restored VM
// gets its own range of the device, filled from the stored copy, mapped
// shared, pre-faulted; ranges go back when the VMs exit; the index and the
// copy survive a daemon restart.
func TestPremapDevDAX(t *testing.T) {
	parallel(t)
	imageDir(t)
	dev := deviceStandIn(t)
	// No VMM pool: its standby VMs would hold ranges of their own, and this
	// test counts the cold invocations' ranges.
	useDevice := func(c *daemon.Config) { c.StoreDeviceFile, c.VMMPool = dev, -1 }
	dataDir := t.TempDir()
	e := startEnvWith(t, dataDir, useDevice)
	c := e.c
	ctx := ctxT(t)
	snap, entry := storedProbe(t, c)
	if entry.PageSize != 2<<20 || entry.Bytes == 0 || entry.Bytes%(2<<20) != 0 || entry.Bytes >= 256<<20 || entry.DeviceOffset < 2<<20 {
		t.Fatalf("store entry %+v: want whole 2 MiB units after the index, fewer than all of guest memory", entry)
	}
	st0, err := c.Store(ctx)
	if err != nil || st0.Kind != "devdax" || st0.UsedBytes != entry.Bytes || st0.Clones != 0 {
		t.Fatalf("store %+v %v", st0, err)
	}
	t.Logf("copy: %d MiB in %d regions at device offset %d MiB, stored in %.0f ms", entry.Bytes>>20, entry.Regions, entry.DeviceOffset>>20, entry.StoredMS)

	checkColdPremapOnDevice(t, ctx, c, snap, entry)

	checkLiveCloneRanges(t, ctx, c, snap, entry, st0)

	// A new daemon finds the copy in the device's index, re-hashes it on
	// first use (the clones' writes went to their own ranges) and maps it.
	e.stop()
	e2 := startEnvWith(t, dataDir, useDevice)
	st2, err := e2.c.Store(ctx)
	if err != nil || len(st2.Entries) != 1 || st2.Entries[0].DeviceOffset != entry.DeviceOffset {
		t.Fatalf("store after a daemon restart: %+v %v", st2, err)
	}
	inv, err := e2.c.InvokeSnapshot(ctx, snap.ID, ev(`{"op":"hello","name":"again"}`), client.InvokeOptions{Strategy: "premap"})
	if err != nil || !inv.OK || inv.Strategy != "premap" || inv.StrategyStats.Fallback != "" {
		t.Fatalf("premap after a daemon restart: %v %+v", err, inv)
	}
	// Deleting the snapshot frees its copy on the device.
	if err := e2.c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := e2.c.Store(ctx); err != nil || len(st.Entries) != 0 || st.FreeBytes != st.CapacityBytes {
		t.Fatalf("after deleting the snapshot: %+v %v", st, err)
	}
}

// deviceStandIn makes the file that stands in for the device: the index
// and room for three copies of the guest's 256 MiB. It is removed at the
// end of the test.
func deviceStandIn(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("THAW_TEST_REGION_DIR")
	if dir == "" {
		dir = "/dev/shm"
	}
	f, err := os.CreateTemp(dir, "thaw-e2e-devdax-")
	if err != nil {
		t.Fatal(err)
	}
	dev := f.Name()
	t.Cleanup(func() { os.Remove(dev) })
	if err := f.Truncate(2<<20 + 3*(256<<20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return dev
}

// premapCold invokes snapshot snap cold with premap, and checks that it
// ran as premap, with no fallback, populated its 256 MiB and took next
// to no major faults.
func premapCold(t *testing.T, ctx context.Context, c *client.Client, snap *client.Snapshot) (*client.Invocation, *allStats) {
	t.Helper()
	inv, err := c.InvokeSnapshot(ctx, snap.ID, ev(`{"op":"hello"}`), client.InvokeOptions{Strategy: "premap"})
	if err != nil || !inv.OK || inv.Strategy != "premap" {
		t.Fatalf("cold premap: %v %+v", err, inv)
	}
	ss := partStats(inv.StrategyStats)
	if ss.Fallback != "" || ss.PopulatedBytes != 256<<20 {
		t.Fatalf("premap stats %+v", ss)
	}
	if inv.Process.MajorFaults > 2 {
		t.Errorf("premap took %d major faults", inv.Process.MajorFaults)
	}
	return inv, ss
}

// checkColdPremapOnDevice: a cold premap invocation fills its own range
// of the device, pre-faults it, and gives the range back when it ends.
func checkColdPremapOnDevice(t *testing.T, ctx context.Context, c *client.Client, snap *client.Snapshot, entry *client.StoreEntry) {
	t.Helper()
	inv, ss := premapCold(t, ctx, c, snap)
	if ss.DeviceBytes != uint64(entry.Bytes) || ss.CloneCopyMS <= 0 {
		t.Fatalf("premap stats %+v", ss)
	}
	t.Logf("cold: range of %d MiB filled in %.1f ms, populate %.1f ms, setup %.1f ms, total %.1f ms, %d major faults",
		ss.DeviceBytes>>20, ss.CloneCopyMS, ss.PopulateMS, inv.Timing.Restore.SetupMS, inv.Timing.TotalMS, inv.Process.MajorFaults)
	if st, err := c.Store(ctx); err != nil || st.Clones != 0 || st.ReservedBytes != 0 {
		t.Fatalf("the cold invocation's range was not given back: %+v %v", st, err)
	}
}

// checkLiveCloneRanges: two live clones hold a range each while their
// guests write and free memory; the ranges go back when they exit.
func checkLiveCloneRanges(t *testing.T, ctx context.Context, c *client.Client, snap *client.Snapshot, entry *client.StoreEntry, st0 *client.StoreInfo) {
	t.Helper()
	// Two live clones: a range each; their guests write and free memory.
	var clones []string
	for i := range 2 {
		v, err := c.RestoreVM(ctx, snap.ID, "premap")
		if err != nil || v.Strategy != "premap" {
			t.Fatalf("clone %d: %v %+v", i, err, v)
		}
		clones = append(clones, v.ID)
		if inv, err := c.InvokeVM(ctx, v.ID, ev(`{"op":"write","mib":32}`), client.InvokeOptions{}); err != nil || !inv.OK {
			t.Fatalf("clone %d: %v %+v", i, err, inv)
		}
	}
	st1, err := c.Store(ctx)
	if err != nil || st1.Clones != 2 || st1.ReservedBytes != 2*entry.Bytes || st1.FreeBytes != st0.FreeBytes-2*entry.Bytes {
		t.Fatalf("two live clones: %+v %v", st1, err)
	}
	for _, id := range clones {
		if err := c.DeleteVM(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := c.Store(ctx); err != nil || st.Clones != 0 || st.FreeBytes != st0.FreeBytes {
		t.Fatalf("after the clones exited: %+v %v", st, err)
	}
}
