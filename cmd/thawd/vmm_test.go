package main

import (
	"strings"
	"testing"
)

// TestVMMSetting: the backend is picked by name from a flag, the
// environment or the config file (default qemu, which thawd links in);
// an unknown name fails at start, listing the known ones, and the settings
// in force show the name.
func TestVMMSetting(t *testing.T) {
	r := runThawd(t, nil, validBase(t)...)
	if r.code != 0 || r.served == nil || r.served.Daemon.VMMName != "qemu" {
		t.Fatalf("default: exit %d, served %+v; want vmm qemu", r.code, r.served)
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
