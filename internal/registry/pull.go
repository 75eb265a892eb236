package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/thaw-dev/thaw/internal/registry/chunk"
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
// leaves "memory" in the registry). Every file's chunks are fetched at
// once (each file's prefetch runs beside the others'), the prefetch files'
// first; the files are then written in that order and synced together.
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lfs := make([]*LazyFile, 0, len(order))
	defer func() {
		for _, lf := range lfs {
			lf.Close()
		}
	}()
	fetched := make([]<-chan error, 0, len(order))
	for _, rf := range order {
		lf, err := c.Open(ctx, rm, rf.Path)
		if err != nil {
			return fmt.Errorf("pull %s: %s: %w", rm.ID, rf.Path, err)
		}
		lfs = append(lfs, lf)
		fetched = append(fetched, lf.Prefetch(ctx, 0, rf.Size))
	}
	outs := make([]*os.File, 0, len(order))
	defer func() {
		for _, f := range outs {
			f.Close()
		}
	}()
	for i, rf := range order {
		dst := filepath.Join(dir, filepath.FromSlash(rf.Path))
		out, err := writeFile(ctx, rm, rf, lfs[i], fetched[i], dst, func(n int64) {
			if progress != nil {
				progress(done+n, total)
			}
		})
		if out != nil {
			outs = append(outs, out)
		}
		if err != nil {
			return fmt.Errorf("pull %s: %s: %w", rm.ID, rf.Path, err)
		}
		done += rf.Size
	}
	return syncAll(outs)
}

// syncAll syncs the files concurrently (one journal commit serves many).
func syncAll(files []*os.File) error {
	var g errgroup.Group
	for _, f := range files {
		g.Go(func() error { return f.Sync() })
	}
	return g.Wait()
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
	out, err := writeFile(ctx, rm, rf, lf, lf.Prefetch(ctx, 0, rf.Size), dst, progress)
	if out == nil {
		return err
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFile writes rf from lf (whose prefetch reports to fetched) to dst
// (which must not exist), hashing it whole against the manifest's digest.
// It returns the file, open and not yet synced, when it was created.
func writeFile(ctx context.Context, rm *RemoteManifest, rf RemoteFile, lf *LazyFile, fetched <-chan error, dst string, progress func(int64)) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := out.Truncate(rf.Size); err != nil {
		return out, err
	}
	h := sha256.New()
	buf := make([]byte, rm.ChunkSize)
	var hashed int64
	for _, ch := range rf.Chunks {
		// A cancelled pull stops here even when every chunk is already
		// fetched: the caller asked for it to end, not to finish.
		if err := ctx.Err(); err != nil {
			return out, err
		}
		off := ch.Index * rm.ChunkSize
		b := buf[:rf.chunkLen(ch.Index, rm.ChunkSize)]
		if _, err := lf.ReadAt(b, off); err != nil {
			return out, err
		}
		if _, err := out.WriteAt(b, off); err != nil {
			return out, err
		}
		chunk.HashZeros(h, off-hashed)
		h.Write(b)
		hashed = off + int64(len(b))
		progress(hashed)
	}
	chunk.HashZeros(h, rf.Size-hashed)
	if err := <-fetched; err != nil {
		return out, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rf.SHA256 {
		return out, fmt.Errorf("%w: written file's digest %s differs from the manifest's", ErrCorrupt, got[:12])
	}
	progress(rf.Size)
	return out, nil
}
