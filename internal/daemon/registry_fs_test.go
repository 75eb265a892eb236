package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/wire"
)

// A directory registry (type fs) on the fake VMM: one node pushes, another
// pulls the function and its snapshot verifies; a push to a full
// filesystem is ErrNoSpace and keeps the local snapshot.
func TestRegistryOnDirectory(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "registry")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ring := keyRing(t)
	on := func(path string) func(*Config) {
		return func(c *Config) { c.Registry = &registry.Config{Type: registry.TypeFS, Path: path}; ring(c) }
	}
	a, _ := fakeService(t, on(dir))
	_, sn := bootAndSnapshot(t, a, "fn")
	res, err := a.PushSnapshot(ctx, sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks == 0 || res.Uploaded != res.Chunks {
		t.Fatalf("push = %+v", res)
	}
	if info := a.Info(); info.Registry == nil || info.Registry.Path != dir || info.Registry.Endpoint != "" {
		t.Fatalf("info registry %+v, want the directory", info.Registry)
	}
	b, _ := fakeService(t, on(dir))
	pr, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Snapshot.ID != sn.ID || !pr.FunctionCreated {
		t.Fatalf("pull = %+v", pr)
	}
	if _, err := b.CheckSnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("pulled snapshot does not verify: %v", err)
	}

	full := t.TempDir()
	if err := unix.Mount("tmpfs", full, "tmpfs", 0, "size=8k,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v): needs CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(full, unix.MNT_DETACH) })
	c, _ := fakeService(t, on(full))
	_, sn = bootAndSnapshot(t, c, "fn")
	if _, err := c.PushSnapshot(ctx, sn.ID); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("push to a full directory: %v, want ErrNoSpace", err)
	}
	if _, err := c.CheckSnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("local snapshot after a push to a full directory: %v", err)
	}
}
