package snapshots

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// fakeSnapshot publishes a snapshot of a 1 MiB guest (sparse memory with
// data at both ends) with a strategy artifact, as prepare leaves it.
func fakeSnapshot(t *testing.T, root, id string) string {
	t.Helper()
	ram := filepath.Join(root, "ram")
	f, err := os.Create(ram)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xab}, 8192), 0)
	f.WriteAt(bytes.Repeat([]byte{0xcd}, 4096), 1<<20-4096)
	f.Close()
	tmp, final := filepath.Join(root, ".tmp-"+id), filepath.Join(root, id)
	if err := os.MkdirAll(filepath.Join(tmp, "strategies", "faasnap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, snapshot.StateFile), []byte(strings.Repeat("state", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "strategies", "faasnap", "loadingset.bin"), []byte("artifact bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	mem, err := snapshot.CopySparse(filepath.Join(tmp, snapshot.MemoryFile), ram)
	if err != nil {
		t.Fatal(err)
	}
	m := &snapshot.Manifest{ID: id, Function: "hello", CreatedAt: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC),
		Guest: snapshot.Guest{MemoryMiB: 1, VCPUs: 1, Machine: "pc"}, VMM: snapshot.VMM{Name: "qemu", Version: "7.2.22", Accel: "tcg"},
		Files: map[string]snapshot.FileInfo{snapshot.MemoryFile: mem}}
	if err := snapshot.Commit(tmp, final, m); err != nil {
		t.Fatal(err)
	}
	return final
}

func TestCopyDir(t *testing.T) {
	root := t.TempDir()
	src := fakeSnapshot(t, root, "snap-0123456789ab")
	tmp, final := filepath.Join(root, ".tmp-snap-ba9876543210"), filepath.Join(root, "snap-ba9876543210")
	m, err := copyDir(src, tmp, "snap-ba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Commit(tmp, final, m); err != nil {
		t.Fatal(err)
	}
	got, _, err := snapshot.Check(final, nil)
	if err != nil {
		t.Fatalf("the copy does not verify: %v", err)
	}
	orig, _ := snapshot.ReadManifest(src)
	if got.ID != "snap-ba9876543210" || got.Files[snapshot.MemoryFile] != orig.Files[snapshot.MemoryFile] ||
		got.Files[snapshot.StateFile].SHA256 != orig.Files[snapshot.StateFile].SHA256 {
		t.Errorf("copy manifest %+v, original %+v", got, orig)
	}
	for _, rel := range []string{snapshot.MemoryFile, snapshot.StateFile, "strategies/faasnap/loadingset.bin"} {
		a, _ := os.ReadFile(filepath.Join(src, rel))
		b, err := os.ReadFile(filepath.Join(final, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs in the copy (%v)", rel, err)
		}
		sa, _ := snapshot.StampOf(filepath.Join(src, rel))
		sb, _ := snapshot.StampOf(filepath.Join(final, rel))
		if sa.Ino == sb.Ino {
			t.Errorf("%s shares its inode with the original", rel)
		}
	}
	if mf := got.Files[snapshot.MemoryFile]; mf.Allocated >= mf.Size {
		t.Errorf("memory copy is not sparse: %d of %d bytes allocated", mf.Allocated, mf.Size)
	}
}

func TestCopyDirRefusesAChangedMemoryFile(t *testing.T) {
	root := t.TempDir()
	src := fakeSnapshot(t, root, "snap-0123456789ab")
	f, _ := os.OpenFile(filepath.Join(src, snapshot.MemoryFile), os.O_WRONLY, 0)
	f.WriteAt([]byte{1}, 100)
	f.Close()
	if _, err := copyDir(src, filepath.Join(root, ".tmp-x"), "snap-ba9876543210"); err == nil {
		t.Fatal("copied a memory file that no longer matches its manifest")
	}
}

func TestCopyMakesAnIndependentVerifiedSnapshot(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.Keep = 5 })
	ctx := context.Background()
	src := w.take(2)
	art := filepath.Join(src.Dir, "strategies", "faasnap", "loadingset.bin")
	if err := os.MkdirAll(filepath.Dir(art), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(art, []byte("artifact bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.db.SetSnapshotPrepared(ctx, src.ID, `{"function":"hello"}`); err != nil {
		t.Fatal(err)
	}
	cp, err := w.m.Copy(ctx, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cp.ID == src.ID || cp.Function != "hello" || cp.Version != 2 || cp.SizeBytes != src.SizeBytes || string(cp.Prepared) != `{"function":"hello"}` {
		t.Fatalf("copy %+v of %+v", cp, src)
	}
	got, err := w.m.Get(ctx, cp.ID)
	if err != nil || string(got.Prepared) != `{"function":"hello"}` {
		t.Fatalf("catalog: %+v, %v", got, err)
	}
	if _, err := w.m.Verify(ctx, got, w.fn, true); err != nil {
		t.Fatalf("the copy does not verify: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(cp.Dir, "strategies", "faasnap", "loadingset.bin"))
	if err != nil || string(b) != "artifact bytes" {
		t.Errorf("artifact: %q, %v", b, err)
	}
	if files := ArtifactFiles(cp.Dir); len(files) != 1 || !strings.HasSuffix(files[0], "loadingset.bin") {
		t.Errorf("artifacts %v", files)
	}
}

func TestCopyLeavesNothingWhenTheSecretScanRefuses(t *testing.T) {
	w := newWorld(t, nil)
	src := w.take(1)
	w.fns.scanErr = errors.New("holds secret db-password")
	if _, err := w.m.Copy(context.Background(), src.ID); err == nil || !strings.Contains(err.Error(), "db-password") {
		t.Fatalf("copy: %v", err)
	}
	if e := w.entries(); len(e) != 1 || e[0] != src.ID {
		t.Errorf("snapshots directory holds %v", e)
	}
}
