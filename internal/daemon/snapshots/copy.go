package snapshots

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/progress"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// Copy duplicates a snapshot under a new id: device state, the sparse
// memory file and every strategy artifact (strategies/), byte for byte,
// with a manifest naming the new id. The copy shares no file with the
// original, so restores of the two do not share page-cache pages, and
// preparing again (boot, record, build artifacts) is not needed. The copy
// is verified as it is written, so its first restore re-hashes nothing.
func (m *Manager) Copy(ctx context.Context, id string) (*catalog.Snapshot, error) {
	progress.Phase(ctx, "verifying")
	v, err := m.Verified(ctx, id, false)
	if err != nil {
		return nil, err
	}
	src := v.Sn
	if err := m.d.Registry.NeedLocalMemory(src, "copying it"); err != nil {
		return nil, err
	}
	start := time.Now()
	newID := newID()
	tmp, final := filepath.Join(m.cfg.Dir, ".tmp-"+newID), filepath.Join(m.cfg.Dir, newID)
	stop := watchCopy(ctx, filepath.Join(tmp, snapshot.MemoryFile), filepath.Join(src.Dir, snapshot.MemoryFile))
	man, err := copyDir(src.Dir, tmp, newID)
	stop()
	if err == nil {
		progress.Phase(ctx, "secret scan")
		err = m.d.Functions.ScanForSecrets(ctx, tmp, "copy "+newID+" of snapshot "+id)
	}
	if err == nil {
		progress.Phase(ctx, "publishing")
		err = snapshot.Commit(tmp, final, man)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, noSpace(err, "copy snapshot "+id)
	}
	stamp, err := stampOf(final)
	if err != nil {
		_ = os.RemoveAll(final)
		return nil, err
	}
	rec := &catalog.Snapshot{ID: newID, Function: src.Function, SourceVM: src.SourceVM, Dir: final,
		MemoryMiB: src.MemoryMiB, SizeBytes: src.SizeBytes, DiskBytes: src.DiskBytes, Stamp: stamp,
		CreateMS: ms(time.Since(start)), CreatedAt: man.CreatedAt, Parent: src.Parent, Version: src.Version}
	// The artifacts are exact copies of files verified above or at their
	// build.
	if err := m.Enter(ctx, rec, src.Prepared); err != nil {
		return nil, err
	}
	m.log.Info("snapshot copied", "snapshot", newID, "from", id, "copy_ms", rec.CreateMS)
	m.Collect(ctx, rec.Function)
	return rec, nil
}

// watchCopy reports, while a copy of the sparse file src to dst runs,
// the bytes of dst allocated so far out of src's (for an operation's
// progress; nothing without a reporter). stop ends it.
func watchCopy(ctx context.Context, dst, src string) (stop func()) {
	if !progress.Reporting(ctx) {
		return func() {}
	}
	total := allocated(src)
	sample := func() {
		progress.Report(ctx, wire.OperationProgress{Phase: "copying", Done: min(allocated(dst), total), Total: total, Unit: "bytes"})
	}
	sample()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				sample()
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// allocated is the bytes a file takes on disk (0 if it is not there).
func allocated(path string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// copyDir copies every file of the snapshot in src into dst (memory
// sparse) and returns src's manifest renamed to id, for snapshot.Commit.
func copyDir(src, dst, id string) (*snapshot.Manifest, error) {
	m, err := snapshot.ReadManifest(src)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return nil, err
	}
	mem, err := snapshot.CopySparse(filepath.Join(dst, snapshot.MemoryFile), filepath.Join(src, snapshot.MemoryFile))
	if err != nil {
		return nil, fmt.Errorf("copy memory: %w", err)
	}
	if mem.SHA256 != m.Files[snapshot.MemoryFile].SHA256 {
		return nil, fmt.Errorf("%w: memory changed while it was copied", snapshot.ErrCorrupt)
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		switch {
		case rel == "." || rel == snapshot.MemoryFile || rel == snapshot.ManifestFile:
			return nil
		case strings.HasPrefix(d.Name(), "."): // a refresh's staging directory
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			return os.Mkdir(filepath.Join(dst, rel), 0o700)
		case !d.Type().IsRegular():
			return nil
		}
		return copyFileSync(filepath.Join(dst, rel), p)
	})
	if err != nil {
		return nil, err
	}
	m.ID = id
	return m, nil
}

// ArtifactFiles are the regular files under a snapshot's strategies/
// (every strategy's artifacts, faasnap's variants included).
func ArtifactFiles(snapDir string) []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(snapDir, "strategies"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func copyFileSync(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return snapshot.WriteSync(dst, os.O_EXCL, func(out *os.File) error {
		_, err := io.Copy(out, in)
		return err
	})
}

// Enter enters a snapshot published in rec.Dir in the catalog with its
// prepare result, and trusts its strategy artifacts as verified (the
// caller verified them as it wrote them), so its first restore re-hashes
// nothing. On a catalog error the directory is removed.
func (m *Manager) Enter(ctx context.Context, rec *catalog.Snapshot, prepared json.RawMessage) error {
	if err := m.d.Catalog.PutSnapshot(ctx, rec); err != nil {
		_ = os.RemoveAll(rec.Dir)
		return err
	}
	if len(prepared) > 0 {
		if err := m.d.Catalog.SetSnapshotPrepared(ctx, rec.ID, string(prepared)); err != nil {
			return err
		}
		rec.Prepared = prepared
	}
	for _, p := range ArtifactFiles(rec.Dir) {
		if err := snapshot.Trust(p); err != nil {
			return err
		}
	}
	return nil
}
