package qemu

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// TestSettings: QEMU is made by its registered name from its own settings,
// the interposer among them; it refuses settings without the interposer
// and names it does not take, and every QEMU it starts preloads the
// interposer it was given.
func TestSettings(t *testing.T) {
	shim := filepath.Join(t.TempDir(), "libthaw_shim.so")
	b, err := vmm.New(Name, vmm.Settings{SettingShim: shim})
	if err != nil {
		t.Fatal(err)
	}
	if qb, ok := b.(Backend); !ok || qb.settings.Shim != shim {
		t.Errorf("backend %#v: want QEMU with the interposer %s", b, shim)
	}
	if got, err := ParseSettings(Settings{Shim: shim}.Values()); err != nil || got.Shim != shim {
		t.Errorf("ParseSettings(Values()) = %+v, %v", got, err)
	}
	for _, bad := range []vmm.Settings{nil, {SettingShim: ""}} {
		if err := vmm.Check(Name, bad); !errors.Is(err, ErrNoInterposer) || !errors.Is(err, vmm.ErrBadSettings) {
			t.Errorf("settings %v: %v, want ErrNoInterposer", bad, err)
		}
	}
	err = vmm.Check(Name, vmm.Settings{SettingShim: shim, "kernel": "/k"})
	if !errors.Is(err, vmm.ErrBadSettings) || !strings.Contains(err.Error(), "unknown kernel (known: shim)") {
		t.Errorf("unknown setting: %v", err)
	}

	// A zero Backend has no interposer: it starts nothing.
	if m, err := (Backend{}).Start(context.Background(), vmm.Spec{}); m != nil || !errors.Is(err, ErrNoInterposer) {
		t.Errorf("Start without an interposer = %v, %v; want ErrNoInterposer", m, err)
	}
	// The interposer is opened first: a missing one fails the start.
	dir := t.TempDir()
	spec := vmm.Spec{ID: "vm-1", RunDir: dir, MemoryMiB: 128, VCPUs: 1, Accel: vmm.AccelTCG, Kernel: "/k", Initrd: "/i",
		Memory: vmm.Memory{Path: filepath.Join(dir, "mem"), Shared: true}, GenID: vmm.NewGenID()}
	if _, err := b.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "interposer: open "+shim) {
		t.Errorf("Start with a missing interposer: %v", err)
	}
}
