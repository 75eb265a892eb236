package regsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// Lazy snapshots (docs/design.md, "Lazy remote restore"): pulled without
// their memory file, which stays in the registry. The snapshot directory
// holds a sparse placeholder of the memory's size and the remote manifest
// (RemoteManifestFile), whose chunk list the memory digest is checked
// against chunk by chunk as pages are fetched.

// lazyFiles are the files a lazy pull leaves in the registry, placeholders
// here: the memory and the strategies' remote artifacts (streamed by their
// restores; restore.Artifact.Remote). streamedFiles are those an import on
// invoke starts fetching at once for a strategy's restore
// (restore.Artifact.Streamed).
var lazyFiles, streamedFiles = func() ([]string, map[restore.Kind][]string) {
	files, streamed := restore.RemoteArtifacts()
	return append([]string{snapshot.MemoryFile}, files...), streamed
}()

// remoteFiles are the lazy files rm has.
func remoteFiles(rm *registry.RemoteManifest) []string {
	var out []string
	for _, f := range lazyFiles {
		if rm.File(f) != nil {
			out = append(out, f)
		}
	}
	return out
}

// RemoteManifestFile is a lazy snapshot's copy of its remote manifest (a
// dot file: never pushed, removed when the memory is completed).
const RemoteManifestFile = ".remote.json"

// RemoteManifest reads a lazy snapshot's remote manifest.
func RemoteManifest(sn *catalog.Snapshot) (*registry.RemoteManifest, error) {
	b, err := os.ReadFile(filepath.Join(sn.Dir, RemoteManifestFile))
	if err != nil {
		return nil, fmt.Errorf("%w: lazy snapshot %s: %v", errdefs.ErrSnapshotUnusable, sn.ID, err)
	}
	rm, err := registry.DecodeRemoteManifest(b)
	if err == nil && rm.ID != sn.ID {
		err = fmt.Errorf("remote manifest of %s", rm.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: lazy snapshot %s: %v", errdefs.ErrSnapshotUnusable, sn.ID, err)
	}
	return rm, nil
}

// writeLazy finishes a lazy pull in dir: the remote manifest kept and a
// sparse placeholder of each remote file's size.
func writeLazy(dir string, rm *registry.RemoteManifest) error {
	if rm.File(snapshot.MemoryFile) == nil {
		return fmt.Errorf("%w: snapshot %s has no memory file", registry.ErrInvalid, rm.ID)
	}
	b, err := rm.Encode()
	if err != nil {
		return err
	}
	if err := snapshot.WriteFileSync(filepath.Join(dir, RemoteManifestFile), b); err != nil {
		return err
	}
	for _, name := range remoteFiles(rm) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		err = f.Truncate(rm.File(name).Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// NeedLocalMemory refuses an operation that reads a lazy snapshot's whole
// memory file (push, copy, store).
func NeedLocalMemory(sn *catalog.Snapshot, what string) error {
	if sn.RemoteMemory {
		return fmt.Errorf("%w: snapshot %s is lazy (its memory is in the registry): pull it (thaw snapshot pull %s) before %s",
			errdefs.ErrConflict, sn.ID, sn.ID, what)
	}
	return nil
}

// CompleteSnapshot pulls a lazy snapshot's memory into place: fetched
// through the chunk cache into a temporary file, its digest checked
// against the manifest's, then renamed over the placeholder (running VMs
// keep the placeholder they opened). Concurrent callers share one pull.
func (s *Sync) CompleteSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	if err := s.NeedRegistry(); err != nil {
		return nil, err
	}
	v, err, _ := s.completions.Do(id, func() (any, error) {
		ctx := context.WithoutCancel(ctx) // shared by every waiter
		sn, err := s.d.Snapshots().Get(ctx, id)
		if err != nil || !sn.RemoteMemory {
			return sn, err
		}
		rm, err := RemoteManifest(sn)
		if err != nil {
			return nil, err
		}
		err = nil
		// Each remote file pulled beside its placeholder, then all renamed.
		files := remoteFiles(rm)
		tmps := make([]string, len(files))
		for i, name := range files {
			p := filepath.Join(sn.Dir, filepath.FromSlash(name))
			tmps[i] = filepath.Join(filepath.Dir(p), ".pull-"+filepath.Base(p))
			_ = os.Remove(tmps[i]) // an earlier pull's leftover
			if err == nil {
				err = s.chunks.PullFile(ctx, rm, name, tmps[i], func(done, total int64) {
					s.report(ctx, wire.OperationProgress{Phase: "pulling " + name, Done: done, Total: total, Unit: "bytes"})
				})
			}
		}
		l := s.d.Snapshots().Lock(id)
		l.Lock()
		defer l.Unlock()
		for i, name := range files {
			if err == nil {
				p := filepath.Join(sn.Dir, filepath.FromSlash(name))
				if err = os.Rename(tmps[i], p); err == nil && name != snapshot.MemoryFile {
					err = snapshot.Trust(p) // verified as it was written
				}
			}
		}
		if err != nil {
			for _, t := range tmps {
				_ = os.Remove(t)
			}
			return nil, Err(err)
		}
		_ = os.Remove(filepath.Join(sn.Dir, RemoteManifestFile))
		_ = snapshot.SyncDir(sn.Dir)
		st, err := snapshot.StampOf(filepath.Join(sn.Dir, snapshot.MemoryFile))
		if err != nil {
			return nil, err
		}
		stamp, _ := json.Marshal(st)
		sn.Stamp, sn.RemoteMemory = string(stamp), false
		sn.DiskBytes = 0
		for _, f := range rm.Files {
			sn.DiskBytes += allocated(filepath.Join(sn.Dir, filepath.FromSlash(f.Path)))
		}
		if err := s.d.Catalog.PutSnapshot(ctx, sn); err != nil {
			return nil, err
		}
		s.log.Info("lazy snapshot completed", "snapshot", id)
		return sn, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*catalog.Snapshot), nil
}

// lazyFile is one remote file of a lazy snapshot as a
// restore.MemorySource: the registry's LazyFile, its chunks pinned in the
// cache until the VM's session closes. It remembers the first error it
// returned, so a failed restore can say the registry was the cause.
type lazyFile struct {
	lf  *registry.LazyFile
	err atomic.Pointer[error]
	// readahead: a read that misses its chunk also starts fetching this
	// many chunks after it (sequential readahead; 0: none).
	readahead int64
}

func (m *lazyFile) Size() int64 { return m.lf.Size() }

// ReadAt reads through the LazyFile; bytes beyond the file read as zeros.
func (m *lazyFile) ReadAt(p []byte, off int64) (int, error) {
	m.readAhead(off)
	n, err := m.lf.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		clear(p[n:])
		return len(p), nil
	}
	if err != nil {
		m.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

// Local reports whether a read at off fetches nothing.
func (m *lazyFile) Local(off int64) bool { return m.lf.Local(off) }

// Fetch fetches the chunk holding off (a fault's, ahead of its read).
func (m *lazyFile) Fetch(off int64) error {
	m.readAhead(off)
	err := m.lf.Fetch(off)
	if err != nil {
		m.err.CompareAndSwap(nil, &err)
	}
	return err
}

// readAhead starts fetching the chunks after off's when off's is missing.
func (m *lazyFile) readAhead(off int64) {
	if m.readahead > 0 && !m.lf.Local(off) {
		cs := m.lf.ChunkSize()
		m.Prefetch(context.Background(), (off/cs+1)*cs, m.readahead*cs)
	}
}

// Prefetch fetches a range in the background; a failure shows in a later
// read of it.
func (m *lazyFile) Prefetch(ctx context.Context, off, n int64) {
	done := m.lf.Prefetch(ctx, off, n)
	go func() { <-done }()
}

func (m *lazyFile) SourceStats() restore.SourceStats {
	st := m.lf.Stats()
	return restore.SourceStats{FetchedBytes: uint64(st.FetchedBytes), FetchedChunks: uint64(st.FetchedChunks), CacheHits: uint64(st.Hits),
		FetchTime: st.FetchTime}
}

// LazyMemory is what a lazy restore reads from the registry: the memory
// and, if the snapshot has them, FaaSnap's loading set and REAP's working
// set.
type LazyMemory struct {
	mem       *lazyFile
	artifacts map[string]*lazyFile // remote artifact files by path
}

// openLazyMemory opens a lazy snapshot's remote files; their fetches live
// until Close, not the request.
func (s *Sync) openLazyMemory(sn *catalog.Snapshot) (*LazyMemory, error) {
	if s.chunks == nil {
		return nil, fmt.Errorf("%w: snapshot %s is lazy and no registry is configured", errdefs.ErrSnapshotUnusable, sn.ID)
	}
	rm, err := RemoteManifest(sn)
	if err != nil {
		return nil, err
	}
	m := &LazyMemory{artifacts: map[string]*lazyFile{}}
	for _, name := range remoteFiles(rm) {
		lf, err := s.chunks.Open(context.Background(), rm, name)
		if err != nil {
			m.Close()
			return nil, Err(err)
		}
		if name == snapshot.MemoryFile {
			m.mem = &lazyFile{lf: lf, readahead: int64(s.cfg.LazyReadahead)}
		} else {
			m.artifacts[name] = &lazyFile{lf: lf}
		}
	}
	return m, nil
}

// sources fills a restore's memory and loading-set sources.
func (m *LazyMemory) sources(snap *restore.Snapshot) {
	snap.Source, snap.MemFile, snap.Remote = m.mem, "", nil
	if len(m.artifacts) > 0 {
		snap.Remote = make(map[string]restore.MemorySource, len(m.artifacts))
		for name, f := range m.artifacts {
			snap.Remote[name] = f
		}
	}
}

// files are the open remote files.
func (m *LazyMemory) files() []*lazyFile {
	var out []*lazyFile
	if m.mem != nil {
		out = append(out, m.mem)
	}
	for _, name := range slices.Sorted(maps.Keys(m.artifacts)) {
		out = append(out, m.artifacts[name])
	}
	return out
}

func (m *LazyMemory) Close() {
	for _, f := range m.files() {
		f.lf.Close()
	}
}

// Failure is the registry's error behind a failed lazy restore, mapped to
// the service's (503 when the store is down, 422 for a corrupt chunk).
func (m *LazyMemory) Failure(vmID string) error {
	if m == nil {
		return nil
	}
	for _, f := range m.files() {
		if p := f.err.Load(); p != nil {
			return fmt.Errorf("vm %s: its memory could not be fetched from the registry: %w", vmID, Err(*p))
		}
	}
	return nil
}

// lazySession closes the lazy memory with the strategy's session.
type lazySession struct {
	restore.Session
	mem *LazyMemory
}

func (l *lazySession) Close() error {
	err := l.Session.Close()
	l.mem.Close()
	return err
}

// LazyOf is the lazy memory a session reads, or nil.
func LazyOf(sess restore.Session) *LazyMemory {
	if l, ok := sess.(*lazySession); ok {
		return l.mem
	}
	return nil
}

// BeginLazy begins a restore of lazy snapshot sn with begin: from the
// registry for a strategy that restores from a memory source; a strategy
// that needs the memory file (restore.ErrNeedsLocalMemory) gets the
// snapshot completed first, then begins on the local files. It returns
// the snapshot restored from (sn, or sn completed since) and the time the
// pull took.
func (s *Sync) BeginLazy(ctx context.Context, sn *catalog.Snapshot, begin restore.BeginFunc, snap restore.Snapshot,
	env restore.Env) (sess restore.Session, from *catalog.Snapshot, pulled time.Duration, err error) {
	mem, err := s.openLazyMemory(sn)
	if err != nil {
		// Completed since it was verified: restore from the local files.
		if now, gerr := s.d.Catalog.GetSnapshot(ctx, sn.ID); gerr == nil && !now.RemoteMemory {
			sess, err = begin(ctx, snap, env)
			return sess, now, 0, err
		}
		return nil, sn, 0, err
	}
	mem.sources(&snap)
	sess, err = begin(ctx, snap, env)
	if err == nil {
		return &lazySession{sess, mem}, sn, 0, nil
	}
	mem.Close()
	if !errors.Is(err, restore.ErrNeedsLocalMemory) {
		return nil, sn, 0, err
	}
	t := time.Now()
	done, err := s.CompleteSnapshot(ctx, sn.ID)
	if err != nil {
		return nil, sn, 0, err
	}
	pulled = time.Since(t)
	snap.Source, snap.Remote, snap.Dir = nil, nil, done.Dir
	sess, err = begin(ctx, snap, env)
	return sess, done, pulled, err
}

// ImportOnInvoke imports a function an invocation found missing (notHere:
// unknown here, or without a snapshot) lazily from the registry and
// returns the snapshot to restore; concurrent invocations share one
// import. REAP's working set (streamedFiles) starts coming into the chunk
// cache while the import finishes. Without a registry, or with import turned off, notHere
// stands.
func (s *Sync) ImportOnInvoke(ctx context.Context, function string, version int, kind restore.Kind, notHere error) (string, error) {
	if s.registry == nil || s.cfg.NoImport || !(errors.Is(notHere, errdefs.ErrNotFound) || errors.Is(notHere, errdefs.ErrConflict)) {
		return "", notHere
	}
	key := function
	if version > 0 {
		key = fmt.Sprintf("%s:%d", function, version)
	}
	v, err, _ := s.imports.Do(key, func() (any, error) {
		res, err := s.pullSnapshot(context.WithoutCancel(ctx), wire.PullRequest{Function: function, Version: version, Lazy: true}, streamedFiles[kind])
		if errors.Is(err, errdefs.ErrExists) { // pulled meanwhile by another request
			return s.d.NewestSnapshot(ctx, function, version)
		}
		if err != nil {
			return nil, err
		}
		return res.Snapshot.ID, nil
	})
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", fmt.Errorf("%w: %s is not on this node and not in the registry: %v", errdefs.ErrNotFound, key, err)
	}
	if err != nil {
		return "", fmt.Errorf("import %s from the registry: %w", key, err)
	}
	s.log.Info("function imported for an invocation", "function", key, "snapshot", v)
	return v.(string), nil
}
