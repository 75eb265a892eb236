package second

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/vmmsuite"
)

// TestSuite: the second backend, taken from the registry by its name,
// passes the conformance suite.
func TestSuite(t *testing.T) {
	vmmsuite.Suite(t, func(t *testing.T) vmm.Backend {
		b, err := vmm.New(Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, func(t *testing.T, id string) vmm.Spec {
		dir := t.TempDir()
		for _, f := range []string{"kernel", "initrd"} {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		run := filepath.Join(dir, id)
		return vmm.Spec{ID: id, RunDir: run, MemoryMiB: 64, VCPUs: 1, Accel: vmm.AccelTCG,
			Kernel: filepath.Join(dir, "kernel"), Initrd: filepath.Join(dir, "initrd"),
			Memory: vmm.Memory{Path: filepath.Join(run, "memory"), Shared: true}, GenID: vmm.NewGenID()}
	})
}
