package main

import (
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
)

// vm get shows what a ready clone counts against --standby-memory, as the
// daemon's answer (checked against openapi.json) gives it.
func TestVMGetShowsReadyCloneMemory(t *testing.T) {
	d := newRealDaemon(t, func(c *daemon.Config) {
		c.KeepAlive, c.VMMPool = -1, -1
		c.Ready = daemon.ReadyConfig{MemoryMiB: 4096, Interval: 20 * time.Millisecond, Window: 3 * time.Second}
	})
	d.echoFunction(t, "echo")
	booted, _ := d.bootSnapshot(t, "echo")
	wantCode(t, d.thaw(t, "vm", "delete", booted, "-q"), 0)
	wantCode(t, d.thaw(t, "invoke", "echo"), 0) // its demand makes the daemon keep a clone
	id := ""
	for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r := d.thaw(t, "vm", "list", "--state", "ready", "-q")
		wantCode(t, r, 0)
		id, _, _ = strings.Cut(strings.TrimSpace(r.stdout), "\n")
	}
	if id == "" {
		t.Fatal("no ready clone appeared")
	}
	r := d.thaw(t, "-o", "json", "vm", "get", id)
	wantCode(t, r, 0)
	mib, _ := jsonValue(t, "vm get", r.stdout).(map[string]any)["ready_memory_mib"].(float64)
	if mib < 1 {
		t.Fatalf("ready clone %s: ready_memory_mib %v, want what it counts (1 MiB or more)\n%s", id, mib, r.stdout)
	}
	r = d.thaw(t, "vm", "get", id)
	wantCode(t, r, 0)
	wantContains(t, "vm get", r.stdout, "State:", "ready", "Standby memory:", "counts against --standby-memory")
}
