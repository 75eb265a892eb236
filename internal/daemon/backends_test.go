package daemon

import (
	"errors"
	"go/build"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/vmm"
	// Configurations in these tests that name no VMM take QEMU, as
	// thawd's do: the test binary links it in as thawd does.
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// TestConfigVMMName: the backend comes by name from the registry, QEMU
// when none is named; an unknown name is a configuration problem naming
// the known ones, and a backend given as a value needs no name.
func TestConfigVMMName(t *testing.T) {
	c := Config{DataDir: "/d", ImageDir: "/i", VMMSettings: vmm.Settings{qemu.SettingShim: "/s"}, Accel: "auto", DefaultMemoryMiB: 512, DefaultVCPUs: 1,
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

// TestNoBackendImported: the daemon reaches monitors only through package
// vmm; no backend is among the packages it is built from (cmd/thawd links
// them in).
func TestNoBackendImported(t *testing.T) {
	const mod = "github.com/thaw-dev/thaw/"
	seen := map[string]bool{}
	var visit func(dir, path string)
	visit = func(dir, path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			if rel, ok := strings.CutPrefix(imp, mod); ok {
				visit(filepath.Join("..", "..", rel), imp)
			}
		}
	}
	visit(".", mod+"internal/daemon")
	if len(seen) < 10 || !seen[mod+"internal/vmm"] {
		t.Fatalf("walked %d packages, without internal/vmm: the walk is broken", len(seen))
	}
	for path := range seen {
		if strings.HasPrefix(path, mod+"internal/vmm/") {
			t.Errorf("the daemon is built from %s", path)
		}
	}
}
