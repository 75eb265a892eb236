package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// PullInto writes every file of the remote snapshot rm into dir (which
// must exist and be empty; the caller publishes it with a rename). Chunks
// come through the cache, so an interrupted pull keeps what it verified
// and a second one resumes; the prefetch files (loading and working sets)
// are fetched first. Holes stay holes. Each file is hashed whole as it is
// written and refused unless it matches the manifest.
func (c *Cache) PullInto(ctx context.Context, rm *RemoteManifest, dir string, progress Progress) error {
	return c.PullExcept(ctx, rm, dir, progress)
}

// PullExcept is PullInto without the files named in skip (a lazy pull
// leaves "memory" in the registry).
func (c *Cache) PullExcept(ctx context.Context, rm *RemoteManifest, dir string, progress Progress, skip ...string) error {
	var total, done int64
	var files []RemoteFile
	for _, f := range rm.Files {
		if !slices.Contains(skip, f.Path) {
			files = append(files, f)
			total += f.Size
		}
	}
	order := make([]RemoteFile, 0, len(files))
	for _, f := range files {
		if slices.Contains(rm.Prefetch, f.Path) {
			order = append(order, f)
		}
	}
	for _, f := range files {
		if !slices.Contains(rm.Prefetch, f.Path) {
			order = append(order, f)
		}
	}
	for _, rf := range order {
		dst := filepath.Join(dir, filepath.FromSlash(rf.Path))
		if err := c.pullFile(ctx, rm, rf, dst, func(n int64) {
			if progress != nil {
				progress(done+n, total)
			}
		}); err != nil {
			return fmt.Errorf("pull %s: %s: %w", rm.ID, rf.Path, err)
		}
		done += rf.Size
	}
	return nil
}

// PullFile writes the file path of rm to dst (which must not exist),
// verified whole against the manifest's digest: a lazy snapshot's memory
// completed in place.
func (c *Cache) PullFile(ctx context.Context, rm *RemoteManifest, path, dst string, progress Progress) error {
	rf := rm.File(path)
	if rf == nil {
		return fmt.Errorf("%w: snapshot %s has no file %s", ErrNotFound, rm.ID, path)
	}
	if err := c.pullFile(ctx, rm, *rf, dst, func(n int64) {
		if progress != nil {
			progress(n, rf.Size)
		}
	}); err != nil {
		return fmt.Errorf("pull %s: %s: %w", rm.ID, path, err)
	}
	return nil
}

func (c *Cache) pullFile(ctx context.Context, rm *RemoteManifest, rf RemoteFile, dst string, progress func(int64)) error {
	lf, err := c.Open(ctx, rm, rf.Path)
	if err != nil {
		return err
	}
	defer lf.Close()
	fetched := lf.Prefetch(ctx, 0, rf.Size)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(rf.Size); err != nil {
		return err
	}
	h := sha256.New()
	buf := make([]byte, rm.ChunkSize)
	var hashed int64
	for _, ch := range rf.Chunks {
		off := ch.Index * rm.ChunkSize
		b := buf[:rf.chunkLen(ch.Index, rm.ChunkSize)]
		if _, err := lf.ReadAt(b, off); err != nil {
			return err
		}
		if _, err := out.WriteAt(b, off); err != nil {
			return err
		}
		hashZeros(h, off-hashed)
		h.Write(b)
		hashed = off + int64(len(b))
		progress(hashed)
	}
	hashZeros(h, rf.Size-hashed)
	if err := <-fetched; err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rf.SHA256 {
		return fmt.Errorf("%w: written file's digest %s differs from the manifest's", ErrCorrupt, got[:12])
	}
	if err := out.Sync(); err != nil {
		return err
	}
	progress(rf.Size)
	return out.Close()
}
