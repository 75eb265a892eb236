package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// standbyOf is the standby VM of snapshot in the catalog, or nil.
func standbyOf(t *testing.T, s *Service, snapshot string) *catalog.VM {
	t.Helper()
	vms, err := s.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.State == catalog.StateStandby && v.Snapshot == snapshot {
			return v
		}
	}
	return nil
}

// The VMM pool: a restore starts a VMM and refills the pool; the next
// restore of that snapshot and strategy takes the standby VM (its VMM
// start is not part of set-up), answers like any other, and the pool is
// refilled again. Standby VMs expire, give way to deletion, eviction and
// starts that need room, and a function can opt out.
func TestVMMPool(t *testing.T) {
	s, b := fakeService(t, func(c *Config) {
		c.KeepAlive, c.VMMPoolTTL, c.MaxVMs, c.AdmissionTimeout = -1, 6*time.Second, 3, 5*time.Second // a TTL a loaded host's boots fit in
	})
	ctx := context.Background()
	booted, snap := bootAndSnapshot(t, s, "echo")
	if err := s.DeleteVM(ctx, booted.ID); err != nil {
		t.Fatal(err)
	}
	vm1, t1, err := s.RestoreVM(ctx, snap.ID, "vanilla")
	if err != nil {
		t.Fatal(err)
	}
	if t1.VMM != "started" || t1.VMMStartMS <= 0 {
		t.Fatalf("first restore: vmm %q, vmm start %.1f ms", t1.VMM, t1.VMMStartMS)
	}
	if err := s.DeleteVM(ctx, vm1.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a standby vm", func() bool { return standbyOf(t, s, snap.ID) != nil })
	sb := standbyOf(t, s, snap.ID)
	if sb.Strategy != "vanilla" || sb.PID == 0 {
		t.Fatalf("standby vm: %+v", sb)
	}
	started := len(b.Specs())
	vm2, t2, err := s.RestoreVM(ctx, snap.ID, "vanilla")
	if err != nil {
		t.Fatal(err)
	}
	if t2.VMM != "pooled" || t2.VMMStartMS != 0 || vm2.ID != sb.ID || vm2.State != catalog.StateRunning {
		t.Fatalf("second restore: vmm %q (start %.1f ms) on %s (%s), the standby was %s", t2.VMM, t2.VMMStartMS, vm2.ID, vm2.State, sb.ID)
	}
	if inv, err := s.InvokeVM(ctx, vm2.ID, InvokeRequest{Event: json.RawMessage(`"pooled"`)}); err != nil || !inv.OK {
		t.Fatalf("invoke the pooled vm: %v %+v", err, inv)
	}
	if err := s.DeleteVM(ctx, vm2.ID); err != nil {
		t.Fatal(err)
	}
	// Another strategy has a pool of its own: a miss.
	vm3, t3, err := s.RestoreVM(ctx, snap.ID, "cached")
	if err != nil || t3.VMM != "started" {
		t.Fatalf("another strategy: %v %+v", err, t3)
	}
	waitFor(t, 5*time.Second, "the pool refilled", func() bool {
		n := 0
		vms, _ := s.ListVMs(ctx)
		for _, v := range vms {
			if v.State == catalog.StateStandby {
				n++
			}
		}
		return s.vmmPool.Count() == 2 && n == 2
	})
	if len(b.Specs()) < started+2 {
		t.Fatalf("%d vmms started, want the refills too", len(b.Specs())-started)
	}
	checkPoolMetrics(t, s)
	if err := s.DeleteVM(ctx, vm3.ID); err != nil {
		t.Fatal(err)
	}
	checkStartTakesRoom(t, s)
	// Expired: unused for its time to live, a standby VM is stopped.
	waitFor(t, 15*time.Second, "standby vms expired", func() bool { return s.vmmPool.Count() == 0 && standbyOf(t, s, snap.ID) == nil })
	if !strings.Contains(promText(t, s), `thaw_vmm_pool_drops_total{reason="expired"} 1`) {
		t.Error("the expired standby vm was not counted")
	}

	checkEvictionDropsStandby(t, s, snap.ID)

	checkDeleteStopsStandby(t, s, snap.ID)

	checkOptedOut(t, s)
}

// checkStartTakesRoom checks that a start that needs room takes it from the
// standby VMs (3 VMs at most: one running, two standing by).
func checkStartTakesRoom(t *testing.T, s *Service) {
	t.Helper()
	ctx := context.Background()
	other, _ := bootAndSnapshot(t, s, "other")
	if _, err := s.BootVM(ctx, "other"); err != nil {
		t.Fatalf("a start with standby vms holding the room: %v", err)
	}
	if n := s.vmmPool.Count(); n != 1 {
		t.Fatalf("%d standby vms after a start needed room, want 1", n)
	}
	s.DeleteVM(ctx, other.ID)
}

// checkPoolMetrics checks the pool's hits and misses per strategy and its
// two standby VMs in the metrics.
func checkPoolMetrics(t *testing.T, s *Service) {
	t.Helper()
	got := promText(t, s)
	for _, want := range []string{
		`thaw_vmm_pool_total{outcome="hit",strategy="vanilla"} 1`,
		`thaw_vmm_pool_total{outcome="miss",strategy="vanilla"} 1`,
		`thaw_vmm_pool_total{outcome="miss",strategy="cached"} 1`,
		`thaw_vmm_pool_standby_vms 2`,
		`thaw_vms{state="standby"} 2`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// checkEvictionDropsStandby checks that an evicted cold start of snap neither
// uses nor refills the pool, and drops what stands by for it.
func checkEvictionDropsStandby(t *testing.T, s *Service, snap string) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := s.RestoreVM(ctx, snap, "vanilla"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a standby vm", func() bool { return standbyOf(t, s, snap) != nil })
	inv, err := s.InvokeCold(ctx, ColdRequest{Snapshot: snap, Strategy: "vanilla",
		InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`), EvictCache: true}})
	if err != nil || inv.Timing.Restore.VMM != "started" {
		t.Fatalf("evicted cold start: %v %+v", err, inv)
	}
	time.Sleep(200 * time.Millisecond)
	if v := standbyOf(t, s, snap); v != nil {
		t.Fatalf("standby vm kept across an eviction: %+v", v)
	}
}

// checkDeleteStopsStandby checks that deleting snap stops its standby VMs;
// they do not hold it.
func checkDeleteStopsStandby(t *testing.T, s *Service, snap string) {
	t.Helper()
	ctx := context.Background()
	vms, _ := s.ListVMs(ctx)
	for _, v := range vms {
		if v.Live() && v.State != catalog.StateStandby {
			s.DeleteVM(ctx, v.ID)
		}
	}
	if _, _, err := s.RestoreVM(ctx, snap, "vanilla"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a standby vm", func() bool { return standbyOf(t, s, snap) != nil })
	vms, _ = s.ListVMs(ctx)
	for _, v := range vms {
		if v.Live() && v.State != catalog.StateStandby {
			s.DeleteVM(ctx, v.ID)
		}
	}
	if err := s.DeleteSnapshot(ctx, snap); err != nil {
		t.Fatalf("delete a snapshot with a standby vm: %v", err)
	}
	if s.vmmPool.Count() != 0 {
		t.Fatal("standby vm of a deleted snapshot")
	}
}

// checkOptedOut checks that a function that opts out gets no standby VMs.
func checkOptedOut(t *testing.T, s *Service) {
	t.Helper()
	ctx := context.Background()
	vm, sn := bootAndSnapshotSpec(t, s, FunctionSpec{Name: "nopool", VMMPool: -1})
	s.DeleteVM(ctx, vm.ID)
	for range 2 {
		v, tm, err := s.RestoreVM(ctx, sn.ID, "vanilla")
		if err != nil || tm.VMM != "started" {
			t.Fatalf("opted out: %v %+v", err, tm)
		}
		s.DeleteVM(ctx, v.ID)
	}
	time.Sleep(200 * time.Millisecond)
	if standbyOf(t, s, sn.ID) != nil {
		t.Fatal("a function that opted out got a standby vm")
	}
}

// withStandby is a daemon with a snapshot restored once (vanilla), so that
// the pool holds a standby VM for it; no VM but that one is live.
func withStandby(t *testing.T) (*Service, *catalog.Snapshot, *catalog.VM) {
	t.Helper()
	s, _ := fakeService(t, func(c *Config) { c.KeepAlive = -1 })
	ctx := context.Background()
	booted, snap := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	vm, _, err := s.RestoreVM(ctx, snap.ID, "vanilla")
	if err != nil {
		t.Fatal(err)
	}
	s.DeleteVM(ctx, vm.ID)
	waitFor(t, 5*time.Second, "a standby vm", func() bool { return standbyOf(t, s, snap.ID) != nil })
	return s, snap, standbyOf(t, s, snap.ID)
}

// A standby VM whose VMM died is not handed out: the restore starts a VMM
// of its own.
func TestVMMPoolSkipsDeadStandby(t *testing.T) {
	s, snap, sb := withStandby(t)
	ctx := context.Background()
	lv, ok := s.live(sb.ID)
	if !ok {
		t.Fatal("standby vm has no process")
	}
	if err := syscall.Kill(lv.M.PID(), syscall.SIGKILL); err != nil { // a crash, not a stop thaw asked for
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the dead standby noticed", func() bool { _, ok := s.live(sb.ID); return !ok })
	v, tm, err := s.RestoreVM(ctx, snap.ID, "vanilla")
	if err != nil {
		t.Fatal(err)
	}
	if tm.VMM != "started" || v.ID == sb.ID {
		t.Fatalf("restore after the standby died: %s on %s", tm.VMM, v.ID)
	}
	if got, err := s.GetVM(ctx, v.ID); err != nil || got.State != catalog.StateRunning {
		t.Fatalf("%+v %v", got, errors.Join(err))
	}
}

// Deleting a standby VM through the API takes it out of the pool: its
// room in the pool's budget comes back and a restore does not find it.
func TestVMMPoolDeleteStandby(t *testing.T) {
	s, snap, sb := withStandby(t)
	ctx := context.Background()
	if err := s.DeleteVM(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	n, _, mem := s.vmmPool.Usage(poolKey{Snapshot: snap.ID, Kind: "vanilla"})
	if mem != 0 || n != 0 {
		t.Fatalf("after deleting the standby vm: pool holds %d MiB, %d ready", mem, n)
	}
	if _, tm, err := s.RestoreVM(ctx, snap.ID, "vanilla"); err != nil || tm.VMM != "started" {
		t.Fatalf("%v %+v", err, tm)
	}
}

// A standby VM still starting when its snapshot is evicted is not added to
// the pool once it is ready (it maps what the eviction meant to drop), and
// the eviction waits for it.
func TestVMMPoolEvictionDuringFill(t *testing.T) {
	s, b := fakeService(t, func(c *Config) { c.KeepAlive = -1 })
	ctx := context.Background()
	booted, snap := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	gate := make(chan struct{})
	var starts atomic.Int32
	b.SetStart(func(vmm.Spec) error {
		if starts.Add(1) == 2 { // the refill after the restore below
			<-gate
		}
		return nil
	})
	defer b.SetStart(nil)
	vm, _, err := s.RestoreVM(ctx, snap.ID, "vanilla")
	if err != nil {
		t.Fatal(err)
	}
	s.DeleteVM(ctx, vm.ID)
	key := poolKey{Snapshot: snap.ID, Kind: "vanilla"}
	waitFor(t, 5*time.Second, "a fill under way", func() bool {
		_, filling, _ := s.vmmPool.Usage(key)
		return filling == 1 && starts.Load() == 2
	})
	// The eviction waits for the fill, which ends once its start does.
	time.AfterFunc(100*time.Millisecond, func() { close(gate) })
	t0 := time.Now()
	if err := s.EvictSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(t0); waited < 100*time.Millisecond || waited > 5*time.Second {
		t.Errorf("the eviction returned after %s: it should wait for the fill under way, no longer", waited)
	}
	_, filling, _ := s.vmmPool.Usage(key)
	if filling != 0 {
		t.Fatalf("the eviction returned with %d fills under way", filling)
	}
	// And the late VM is gone by then: a deletion right after must not find
	// the snapshot in use.
	vms, _ := s.ListVMs(ctx)
	for _, v := range vms {
		if v.Live() {
			t.Fatalf("vm %s (%s) still live when the eviction returned", v.ID, v.State)
		}
	}
	if n := s.vmmPool.Count(); n != 0 {
		t.Fatalf("%d standby vms after the eviction", n)
	}
	_, _, mem := s.vmmPool.Usage(key)
	if mem != 0 {
		t.Fatalf("the pool still counts %d MiB", mem)
	}
}
