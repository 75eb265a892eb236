package snapshots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// A snapshot restores only with what it was taken of: each difference is
// named, all of them at once.
func TestVerifyRefusesWhatDiffers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(w *world, fn *catalog.Function)
		words []string
	}{
		{"function code", func(_ *world, fn *catalog.Function) { fn.Digest = "code2" }, []string{"function code digest differs"}},
		{"accelerator", func(w *world, _ *catalog.Function) { w.accel = "kvm" }, []string{"taken on tcg, this daemon runs kvm"}},
		{"vmm", func(w *world, _ *catalog.Function) { w.m.cfg.VMM.Version = "8.2.0" }, []string{"taken with qemu 7.2.22, this daemon runs qemu 8.2.0"}},
		{"machine", func(w *world, _ *catalog.Function) { w.m.cfg.VMM.ABI = "q35" }, []string{`guest machine "pc-i440fx-7.2", this daemon builds "q35"`}},
		{"shape", func(_ *world, fn *catalog.Function) { fn.VCPUs = 2 }, []string{"guest shape 1 MiB/1 vCPU, function wants 1 MiB/2 vCPU"}},
		{"dependencies", func(w *world, _ *catalog.Function) {
			w.m.d.CheckDepsInput = func(*snapshot.Manifest, *catalog.Function) error {
				return fmt.Errorf("%w: dependency layer differs", snapshot.ErrIncompatible)
			}
		}, []string{"dependency layer differs"}},
		{"layer missing", func(w *world, _ *catalog.Function) { w.fns.layerErr = errors.New("layer abc is gone") }, []string{"layer abc is gone"}},
		{"kernel and code", func(w *world, fn *catalog.Function) {
			img := *testImage
			img.Files = map[string]guestimage.File{}
			for k, v := range testImage.Files {
				img.Files[k] = v
			}
			img.Files["vmlinuz"] = guestimage.File{SHA256: "k2"}
			w.m.cfg.Image = &img
			fn.Digest = "code2"
		}, []string{"kernel digest differs", "function code digest differs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, nil)
			sn := w.take(1)
			fn := *w.fn
			tc.edit(w, &fn)
			_, err := w.m.Verify(context.Background(), sn, &fn, false)
			if !errors.Is(err, errdefs.ErrSnapshotUnusable) {
				t.Fatalf("err %v, want ErrSnapshotUnusable", err)
			}
			for _, words := range tc.words {
				if !strings.Contains(err.Error(), words) {
					t.Errorf("%v does not say %q", err, words)
				}
			}
		})
	}
}

// A changed memory file is re-hashed (its stamp moved) and refused; the
// stamp of a good check is kept, so the next one trusts it.
func TestVerifyRehashesAChangedMemoryFile(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	sn := w.take(1)
	stamp := sn.Stamp
	if _, err := w.m.Verify(ctx, sn, w.fn, true); err != nil || sn.Stamp != stamp {
		t.Fatalf("full check: %v; stamp %s, was %s", err, sn.Stamp, stamp)
	}
	f, err := os.OpenFile(filepath.Join(sn.Dir, snapshot.MemoryFile), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{1}, 100)
	f.Close()
	if _, err := w.m.Verify(ctx, sn, w.fn, false); !errors.Is(err, errdefs.ErrSnapshotUnusable) {
		t.Fatalf("a changed memory file verified: %v", err)
	}
}

func TestVerifiedLooksUpAndTraces(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	sn := w.take(1)
	v, err := w.m.Verified(ctx, sn.ID, false)
	if err != nil || v.Sn.ID != sn.ID || v.Fn.Name != "hello" || v.M.ID != sn.ID {
		t.Fatalf("verified %+v, %v", v, err)
	}
	if _, err := w.m.Check(ctx, "snap-000000000000"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("check of an unknown snapshot: %v", err)
	}
	row, err := w.m.Row(ctx, sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.VerifiedRow(ctx, row, true); err != nil {
		t.Fatal(err)
	}
	// Each verification is one span, ended with its function and error.
	ok := len(w.traced) == 3 && w.traced[0] == sn.ID+" hello <nil>" && w.traced[2] == sn.ID+" hello <nil>" &&
		strings.HasPrefix(w.traced[1], "snap-000000000000  ") && !strings.HasSuffix(w.traced[1], "<nil>")
	if !ok {
		t.Errorf("spans %q", w.traced)
	}
}

// A lazy snapshot whose registry manifest cannot be read is refused.
func TestVerifyRefusesALazySnapshotWithoutItsRemoteManifest(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	sn := w.take(1)
	sn.RemoteMemory = true
	if err := w.db.PutSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Verify(ctx, sn, w.fn, false); !errors.Is(err, errdefs.ErrSnapshotUnusable) {
		t.Fatalf("lazy snapshot without a remote manifest: %v", err)
	}
	if _, err := w.m.Copy(ctx, sn.ID); err == nil {
		t.Fatal("copied a lazy snapshot")
	}
}
