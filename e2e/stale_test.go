package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// changedImage is a copy of the guest image whose initramfs has 512 zero
// bytes more at its end (the kernel skips such padding), so the image and
// every snapshot of it differ: what a rebuilt image looks like to a daemon.
func changedImage(t *testing.T, base string) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var im map[string]any
	b, err := os.ReadFile(filepath.Join(base, "image.json"))
	if err != nil || json.Unmarshal(b, &im) != nil {
		t.Fatalf("image.json: %v", err)
	}
	for name := range im["files"].(map[string]any) {
		if name != "initrd.img" {
			if err := os.Symlink(filepath.Join(base, name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	src, err := os.Open(filepath.Join(base, "initrd.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(dir, "initrd.img"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(dst, h), src)
	if err == nil {
		var m int
		m, err = io.MultiWriter(dst, h).Write(make([]byte, 512))
		n += int64(m)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	files := im["files"].(map[string]any)
	files["initrd.img"] = map[string]any{"size": n, "sha256": hex.EncodeToString(h.Sum(nil))}
	im["hash"] = "changed" + im["hash"].(string)[7:]
	out, _ := json.Marshal(im)
	if err := os.WriteFile(filepath.Join(dir, "image.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A version's snapshot never goes stale silently: after the guest image
// changes, the daemon rebuilds the version in the background (an
// operation), cold starts meanwhile say they booted an older build and
// why, and once rebuilt the version restores from its new snapshot.
func TestStaleVersionIsRebuilt(t *testing.T) {
	parallel(t)
	dataDir := t.TempDir()
	e := startEnv(t, dataDir)
	d := deploy(t, e, "aging", versionedFunction(t, "v1"), client.DeployRequest{})
	e.stop()

	image := changedImage(t, imageDir(t))
	e = startEnvWith(t, dataDir, func(c *daemon.Config) { c.ImageDir = image })
	ctx := ctxT(t)
	mark, inv := markOf(t, e, "aging")
	if mark != "v1" || inv.Version != 1 {
		t.Fatalf("stale version ran %q (version %d)", mark, inv.Version)
	}
	b := inv.Timing.Build
	if b == nil || b.Served != "boot" || !strings.Contains(b.Stale, "guest image changed") {
		t.Fatalf("a cold start of a stale version says %+v, want it booted and why", b)
	}
	t.Logf("stale cold start: %+v, total %.0f ms", *b, inv.Timing.TotalMS)

	ops, err := e.c.ListOperations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rebuild *client.Operation
	for i := range ops {
		if ops[i].Kind == "rebuild" && ops[i].Target == "aging:1" {
			rebuild = &ops[i]
		}
	}
	if rebuild == nil {
		t.Fatalf("no rebuild operation for aging:1 in %+v", ops)
	}
	done, err := e.c.WaitOperation(ctx, rebuild.ID, nil)
	if err != nil || done.State != "succeeded" || done.Result == nil || done.Result.Deploy == nil {
		t.Fatalf("rebuild: %v %+v", err, done)
	}
	newSnap := done.Result.Deploy.Snapshots[0]
	if newSnap == d.Snapshots[0] {
		t.Fatal("the rebuild kept the old snapshot")
	}
	mark, inv = markOf(t, e, "aging")
	if mark != "v1" || inv.Version != 1 || inv.Timing.Build != nil || inv.Snapshot != newSnap {
		t.Fatalf("after the rebuild: %q version %d build %+v snapshot %s (want %s)", mark, inv.Version, inv.Timing.Build, inv.Snapshot, newSnap)
	}
	if _, err := e.c.GetSnapshot(ctx, d.Snapshots[0]); err == nil {
		t.Error("the stale snapshot is still there")
	}
}
