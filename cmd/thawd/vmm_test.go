package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// TestVMMSetting: the backend is picked by name from a flag, the
// environment or the config file (default qemu, which thawd links in);
// an unknown name fails at start, listing the known ones, and the settings
// in force show the name. --shim is a setting of the QEMU backend.
func TestVMMSetting(t *testing.T) {
	base := validBase(t)
	r := runThawd(t, nil, base...)
	if r.code != 0 || r.served == nil || r.served.Daemon.VMMName != "qemu" {
		t.Fatalf("default: exit %d, served %+v; want vmm qemu", r.code, r.served)
	}
	shim := base[slices.Index(base, "--shim")+1]
	if got := r.served.Daemon.VMMSettings; !maps.Equal(got, vmm.Settings{qemu.SettingShim: shim}) {
		t.Errorf("backend settings %v, want QEMU's interposer %s", got, shim)
	}
	r = runThawd(t, nil, append(validBase(t), "--vmm", "firecracker")...)
	if r.code != exitFailed || r.served != nil || !strings.Contains(r.stderr, `unknown vmm backend "firecracker" (known: qemu)`) {
		t.Errorf("--vmm firecracker: exit %d, served %v, stderr %q; want a failure listing qemu", r.code, r.served != nil, r.stderr)
	}
	file := writeConfig(t, "vmm: cloud-hypervisor\n")
	r = runThawd(t, nil, append(validBase(t), "--config", file)...)
	if r.code != exitFailed || !strings.Contains(r.stderr, `unknown vmm backend "cloud-hypervisor"`) {
		t.Errorf("vmm in the config file: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runThawd(t, map[string]string{"THAWD_VMM": "qemu"}, append(validBase(t), "config", "check")...)
	if r.code != 0 || !strings.Contains(r.stdout, "vmm: qemu # env THAWD_VMM") {
		t.Errorf("config check: exit %d, stdout %q; want the vmm setting and its source", r.code, r.stdout)
	}
}
