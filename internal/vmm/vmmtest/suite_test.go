package vmmtest

import (
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/vmmsuite"
)

// TestSuite: the fake passes the conformance suite every backend passes,
// so what the daemon's tests learn on it holds for a real monitor.
func TestSuite(t *testing.T) {
	vmmsuite.Suite(t, func(*testing.T) vmm.Backend { return &Fake{} }, func(t *testing.T, id string) vmm.Spec {
		dir := t.TempDir()
		if err := WriteImage(dir); err != nil {
			t.Fatal(err)
		}
		run := filepath.Join(dir, id)
		return vmm.Spec{ID: id, RunDir: run, MemoryMiB: 64, VCPUs: 1, Accel: vmm.AccelTCG,
			Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img"), Cmdline: "console=ttyS0",
			Disks:  []vmm.Disk{{Path: filepath.Join(dir, "rootfs.ext4"), ReadOnly: true}},
			Memory: vmm.Memory{Path: filepath.Join(run, "memory"), Shared: true}, GenID: vmm.NewGenID()}
	})
}
