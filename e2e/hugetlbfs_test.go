package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/hugetest"
	"github.com/thaw-dev/thaw/internal/store"
)

// TestPremapHugeTLBFS: premap from a memory store on hugetlbfs, with a huge
// page pool configured for the test. The copy holds whole huge pages; two
// live clones map it, copy-on-write into huge pages of their own, reserve
// the copy's size each while they live, and leave the copy intact after
// freeing memory. A pool too small for a clone's reservation makes premap
// fall back and say why.
func TestPremapHugeTLBFS(t *testing.T) {
	parallel(t)
	imageDir(t)
	// 256 MiB guests: the copy is at most 128 huge pages and each live
	// clone reserves as many.
	huge := hugetest.Mount(t, 3*128+8)
	t.Cleanup(func() { os.RemoveAll(store.HugeMetaDirFor(huge)) })
	// No VMM pool: its standby VMs would reserve huge pages of their own,
	// and this test counts the clones' reservations.
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.StoreDir, c.VMMPool = huge, -1 })
	c := e.c
	ctx := ctxT(t)
	snap, entry := storedProbe(t, c)
	if entry.PageSize != 2<<20 || entry.Bytes == 0 || entry.Bytes%(2<<20) != 0 || entry.Bytes >= 256<<20 {
		t.Fatalf("store entry %+v: want whole huge pages, fewer than all of guest memory", entry)
	}
	t.Logf("copy: %d MiB in %d regions of huge pages, stored in %.0f ms", entry.Bytes>>20, entry.Regions, entry.StoredMS)
	st0, err := c.Store(ctx)
	if err != nil || st0.Kind != "hugetlbfs" {
		t.Fatalf("store %+v %v", st0, err)
	}

	checkColdPremapHuge(t, ctx, c, snap, entry)

	clones := startHugeClones(t, ctx, c, snap, entry)
	st1, err := c.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st1.ReservedBytes < 2*entry.Bytes-2*int64(256<<20) || st1.ReservedBytes <= st0.ReservedBytes {
		t.Errorf("reserved %d MiB with two clones alive (%d before)", st1.ReservedBytes>>20, st0.ReservedBytes>>20)
	}
	// Freed memory is discarded by QEMU (a hole punch into the copy,
	// which the interposer refuses, then MADV_DONTNEED).
	if inv, err := c.InvokeVM(ctx, clones[0], ev(`{"op":"write","mib":48}`), client.InvokeOptions{}); err != nil || !inv.OK {
		t.Fatalf("write: %v %+v", err, inv)
	}
	time.Sleep(5 * time.Second)
	for _, id := range clones {
		if err := c.DeleteVM(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	st2, err := c.Store(ctx)
	if err != nil || st2.ReservedBytes != st0.ReservedBytes || st2.UsedBytes != entry.Bytes {
		t.Fatalf("after the clones exited: %+v %v (reserved before %d)", st2, err, st0.ReservedBytes)
	}
	if inv, err := c.InvokeSnapshot(ctx, snap.ID, ev(`{"op":"hello"}`), client.InvokeOptions{Strategy: "premap"}); err != nil ||
		inv.Strategy != "premap" || inv.StrategyStats.Fallback != "" {
		t.Fatalf("premap after a clone freed memory (the copy is re-hashed first): %v %+v", err, inv)
	}

	t.Run("pool too small falls back", func(t *testing.T) { checkHugePoolTooSmall(t, ctx, c, huge, snap) })
}

// checkColdPremapHuge: a cold premap invocation maps the copy's huge
// pages, taking next to no major faults.
func checkColdPremapHuge(t *testing.T, ctx context.Context, c *client.Client, snap *client.Snapshot, entry *client.StoreEntry) {
	t.Helper()
	inv, st := premapCold(t, ctx, c, snap)
	if st.StoreBytes != uint64(entry.Bytes) {
		t.Fatalf("premap stats %+v", st)
	}
	if inv.Process.HugetlbKiB<<10 != uint64(entry.Bytes) {
		t.Errorf("the clone maps %d KiB of huge pages, the copy is %d KiB", inv.Process.HugetlbKiB, entry.Bytes>>10)
	}
	t.Logf("cold: populate %.1f ms, setup %.1f ms, total %.1f ms, %d major faults", st.PopulateMS,
		inv.Timing.Restore.SetupMS, inv.Timing.TotalMS, inv.Process.MajorFaults)
}

// startHugeClones restores two live premap clones and checks each maps
// every page of the copy, shared until written, then private; it returns
// their ids.
func startHugeClones(t *testing.T, ctx context.Context, c *client.Client, snap *client.Snapshot, entry *client.StoreEntry) []string {
	t.Helper()
	var clones []string
	for i := range 2 {
		v := restoreVM(t, c, snap.ID, "premap")
		clones = append(clones, v.ID)
		if v.Strategy != "premap" {
			t.Fatalf("clone %d restored as %s", i, v.Strategy)
		}
		if inv, err := c.InvokeVM(ctx, v.ID, ev(`{"op":"hello"}`), client.InvokeOptions{}); err != nil || !inv.OK {
			t.Fatalf("clone %d: %v %+v", i, err, inv)
		}
		m, err := c.VMMemory(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Every copy page is mapped: shared until written, then private.
		if m.HugetlbBytes != uint64(entry.Bytes) || m.HugetlbAnonBytes == 0 || m.HugetlbAnonBytes >= m.HugetlbBytes {
			t.Errorf("clone %d maps %d MiB of huge pages, %d MiB copied on write; copy is %d MiB", i,
				m.HugetlbBytes>>20, m.HugetlbAnonBytes>>20, entry.Bytes>>20)
		}
		t.Logf("clone %d: huge pages %d MiB mapped, %d MiB copied on write; anon %d MiB", i,
			m.HugetlbBytes>>20, m.HugetlbAnonBytes>>20, m.AnonBytes>>20)
	}
	return clones
}

// checkHugePoolTooSmall takes every free huge page but a few: premap
// falls back to vanilla and says why.
func checkHugePoolTooSmall(t *testing.T, ctx context.Context, c *client.Client, huge string, snap *client.Snapshot) {
	// Take every free huge page but a few.
	hog, err := os.Create(filepath.Join(huge, "hog"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(hog.Name())
	defer hog.Close()
	in, err := c.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.EINTR
	for err == unix.EINTR { // a signal interrupts a long hugetlbfs fallocate; what it allocated stays
		err = unix.Fallocate(int(hog.Fd()), 0, 0, in.FreeBytes-4<<20)
	}
	if err != nil {
		t.Fatal(err)
	}
	inv, err := c.InvokeSnapshot(ctx, snap.ID, ev(`{"op":"hello"}`), client.InvokeOptions{Strategy: "premap"})
	if err != nil || !inv.OK {
		t.Fatalf("%v %+v", err, inv)
	}
	if inv.Strategy != "vanilla" || !strings.Contains(inv.StrategyStats.Fallback, "huge page pool") {
		t.Fatalf("ran as %s, fallback %q", inv.Strategy, inv.StrategyStats.Fallback)
	}
}
