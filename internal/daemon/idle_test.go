package daemon

import (
	"context"
	"testing"
	"time"
)

// A cold invocation's VM kept by the keep-alive pool is listed as idle,
// with when it will be stopped; a booted VM is not.
func TestIdleVMsAreMarked(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.KeepAlive, c.VMMPool = 30*time.Second, -1 })
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	before := time.Now()
	inv, err := s.InvokeCold(ctx, ColdRequest{Function: "echo"})
	if err != nil || inv.Mode != "cold" {
		t.Fatalf("cold: %v %+v", err, inv)
	}
	vms, err := s.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idle := 0
	for _, v := range vms {
		b := VMBody(v, nil)
		switch v.ID {
		case inv.VM:
			idle++
			if !b.Idle || b.IdleUntil == nil || b.State != "running" || b.IdleUntil.Before(before.Add(30*time.Second)) ||
				b.IdleUntil.After(time.Now().Add(30*time.Second)) {
				t.Errorf("kept vm: idle %v until %v, state %s; want idle about 30 s from now, running", b.Idle, b.IdleUntil, b.State)
			}
		case booted.ID:
			if b.Idle || b.IdleUntil != nil {
				t.Errorf("booted vm is marked idle: %+v", b)
			}
		}
	}
	if idle != 1 {
		t.Fatalf("the kept vm %s is not listed: %+v", inv.VM, vms)
	}
	if v, err := s.GetVM(ctx, inv.VM); err != nil || v.IdleUntil.IsZero() {
		t.Errorf("GET of the kept vm: %v, idle until %v", err, v.IdleUntil)
	}
	// Deleted, it is no longer kept.
	if err := s.DeleteVM(ctx, inv.VM); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetVM(ctx, booted.ID); err != nil || !v.IdleUntil.IsZero() {
		t.Errorf("booted vm: %v, idle until %v", err, v.IdleUntil)
	}
}
