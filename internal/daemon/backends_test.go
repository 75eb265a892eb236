package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/vmm"
	// Configurations in these tests that name no VMM take QEMU, as
	// thawd's do: the test binary links it in as thawd does.
	_ "github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// TestConfigVMMName: the backend comes by name from the registry, QEMU
// when none is named; an unknown name is a configuration problem naming
// the known ones, and a backend given as a value needs no name.
func TestConfigVMMName(t *testing.T) {
	c := Config{DataDir: "/d", ImageDir: "/i", ShimPath: "/s", Accel: "auto", DefaultMemoryMiB: 512, DefaultVCPUs: 1,
		BootTimeout: time.Minute, InvokeTimeout: time.Minute}
	if err := c.Check(); err != nil {
		t.Fatalf("no vmm named: %v", err)
	}
	if got := c.WithDefaults().VMMName; got != vmm.DefaultBackend {
		t.Errorf("default vmm %q, want %q", got, vmm.DefaultBackend)
	}
	c.VMMName = "no-such-vmm"
	err := c.Check()
	if !errors.Is(err, vmm.ErrUnknownBackend) || !strings.Contains(err.Error(), "(known: qemu") {
		t.Errorf("unknown vmm: %v, want ErrUnknownBackend listing qemu", err)
	}
	c.VMM = fakeNamed{}
	if err := c.Check(); err != nil {
		t.Errorf("a backend given as a value: %v", err)
	}
}

type fakeNamed struct{ vmm.Backend }
