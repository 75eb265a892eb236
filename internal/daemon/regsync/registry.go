package regsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/codearchive"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// Err maps the registry's errors to the service's kinds (errdefs).
func Err(err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %v; nothing was kept", errdefs.ErrNoSpace, err)
	case errors.Is(err, registry.ErrBusy), errors.Is(err, registry.ErrVersionConflict):
		return fmt.Errorf("%w: %v", errdefs.ErrConflict, err)
	case errors.Is(err, registry.ErrNotFound):
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	case errors.Is(err, registry.ErrCorrupt), errors.Is(err, registry.ErrInvalid), errors.Is(err, registry.ErrUntrusted),
		errors.Is(err, snapshot.ErrCorrupt), errors.Is(err, snapshot.ErrMissing):
		return fmt.Errorf("%w: %v", errdefs.ErrSnapshotUnusable, err)
	}
	return err
}

// PushSnapshot uploads a snapshot to the registry (chunks the store lacks,
// then its manifest), and its function's record and code.
func (s *Sync) PushSnapshot(ctx context.Context, id string) (*wire.PushResult, error) {
	if err := s.NeedRegistry(); err != nil {
		return nil, err
	}
	s.phase(ctx, "verifying")
	sn, fn, err := s.d.Verified(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := NeedLocalMemory(sn, "pushing it"); err != nil {
		return nil, err
	}
	s.phase(ctx, "secret scan")
	if err := s.d.Functions().ScanForSecrets(ctx, sn.Dir, "snapshot "+id); err != nil {
		return nil, err
	}
	t0 := time.Now()
	info := registry.PushInfo{SourceVM: sn.SourceVM, Parent: sn.Parent, Prepared: sn.Prepared}
	if info.Layer, info.LayerFile, err = s.d.Functions().PushedLayer(fn); err != nil {
		return nil, err
	}
	rm, st, err := s.registry.Push(ctx, sn.Dir, info,
		func(done, total int64) {
			s.report(ctx, wire.OperationProgress{Phase: "pushing", Done: done, Total: total, Unit: "bytes"})
		})
	if err != nil {
		return nil, Err(err)
	}
	s.phase(ctx, "function record")
	if err := s.pushFunction(ctx, fn, rm, sn.Version); err != nil {
		return nil, Err(err)
	}
	if sn.Version > 0 {
		if err := s.pushVersion(ctx, fn, sn, rm); err != nil {
			return nil, Err(err)
		}
	}
	res := &wire.PushResult{Snapshot: id, Function: fn.Name, Chunks: st.Chunks, Uploaded: st.Uploaded,
		UploadedBytes: st.UploadedBytes, StoredBytes: st.StoredBytes, DataBytes: st.DataBytes,
		ChunkSize: rm.ChunkSize, PushMS: ms(time.Since(t0))}
	s.log.Info("snapshot pushed", "snapshot", id, "chunks", st.Chunks, "uploaded", st.Uploaded,
		"uploaded_bytes", st.UploadedBytes, "push_ms", res.PushMS)
	return res, nil
}

// pushFunction writes the function's record, naming rm as its latest
// snapshot unless the registry's latest is newer.
func (s *Sync) pushFunction(ctx context.Context, fn *catalog.Function, rm *registry.RemoteManifest, version int) error {
	local, err := rm.LocalManifest()
	if err != nil {
		return err
	}
	latest, latestAt := rm.ID, local.CreatedAt
	if old, err := s.registry.GetFunction(ctx, fn.Name); err == nil && old.Latest != rm.ID && old.LatestCreatedAt.After(latestAt) {
		latest, latestAt, version = old.Latest, old.LatestCreatedAt, old.Version
	} else if err != nil && !errors.Is(err, registry.ErrNotFound) && !errors.Is(err, registry.ErrInvalid) && !errors.Is(err, registry.ErrUntrusted) {
		return err
	}
	code, err := codearchive.Pack(filepath.Join(fn.CodeDir, fn.Name))
	if err != nil {
		return err
	}
	rec := functionRecord(fn)
	rec.Latest, rec.LatestCreatedAt, rec.Version = latest, latestAt, version
	return s.registry.PushFunction(ctx, rec, code)
}

// functionRecord is fn's configuration as the registry carries it.
func functionRecord(fn *catalog.Function) registry.FunctionRecord {
	return registry.FunctionRecord{Name: fn.Name, Digest: fn.Digest, MemoryMiB: fn.MemoryMiB,
		VCPUs: fn.VCPUs, Egress: fn.Network.Egress, Services: fn.Network.Services, MaxConcurrency: fn.MaxConcurrency,
		KeepAliveS: fn.KeepAliveS, VMMPool: fn.VMMPool, VMMPoolTTLS: fn.VMMPoolTTLS, Env: fn.Env, Secrets: fn.Secrets, Deps: recordDeps(fn.Deps)}
}

// PullSnapshot fetches a snapshot from the registry (req.Snapshot, or the
// newest pushed for req.Function), registering its function from the
// registry's record when this node does not have it. The snapshot is
// written into a temporary directory through the chunk cache, verified
// whole against its manifest and its inputs, and only then renamed into
// place and entered in the catalog, as a local snapshot is.
func (s *Sync) PullSnapshot(ctx context.Context, req wire.PullRequest) (*wire.PullResult, error) {
	return s.pullSnapshot(ctx, req, nil)
}

// pullSnapshot is PullSnapshot that also starts fetching the remote files
// named in warm (a lazy pull's streamed files a restore will read next)
// into the chunk cache once the pull's own files are here.
func (s *Sync) pullSnapshot(ctx context.Context, req wire.PullRequest, warm []string) (*wire.PullResult, error) {
	if err := s.CheckPull(req); err != nil {
		return nil, err
	}
	t0 := time.Now()
	steps := &stepTimes{at: t0}
	id, code, as, err := s.pullSource(ctx, req)
	if err != nil {
		return nil, err
	}
	if sn, err := s.d.Catalog.GetSnapshot(ctx, id); err == nil {
		return s.completePull(ctx, sn, req.Lazy, t0)
	}
	steps.mark("record")
	s.phase(ctx, "manifest")
	rm, err := s.registry.GetManifest(ctx, id)
	if err != nil {
		return nil, Err(err)
	}
	steps.mark("manifest")
	if !req.Lazy {
		warm = nil
	}
	local, err := rm.LocalManifest()
	if err != nil {
		return nil, Err(err)
	}
	// No collection of the dependency cache until the snapshot is recorded.
	endDeps := s.d.HoldLayers()
	defer endDeps()
	res := &wire.PullResult{}
	fn, cfg, undo, err := s.pullTarget(ctx, rm, local, code, as, res, steps)
	if err != nil {
		return nil, err
	}
	// Refuse before fetching anything a snapshot this node cannot restore.
	if err := s.d.Snapshots().Compatible(local, cfg); err != nil {
		undo()
		return nil, fmt.Errorf("%w: snapshot %s: %v", errdefs.ErrSnapshotUnusable, id, err)
	}
	if err := s.d.Functions().PullLayer(ctx, rm); err != nil {
		undo()
		return nil, err
	}
	before := s.chunks.Stats()
	sn, err := s.materialize(ctx, rm, local, req.Lazy, steps, warm)
	if err != nil {
		undo()
		return nil, err
	}
	if as != nil {
		if sn, err = s.enterVersion(ctx, as, cfg, sn); err != nil {
			_ = s.d.Snapshots().Delete(context.WithoutCancel(ctx), id)
			undo()
			return nil, err
		}
	}
	after := s.chunks.Stats()
	res.Snapshot = s.d.SnapshotBody(sn)
	res.FetchedChunks, res.FetchedBytes = after.FetchedChunks-before.FetchedChunks, after.FetchedBytes-before.FetchedBytes
	res.CachedChunks = after.Hits - before.Hits
	res.PullMS = ms(time.Since(t0))
	s.log.Info("snapshot pulled", append([]any{"snapshot", id, "function", fn.Name, "lazy", req.Lazy, "fetched_chunks", res.FetchedChunks,
		"fetched_bytes", res.FetchedBytes, "cached_chunks", res.CachedChunks, "pull_ms", res.PullMS}, steps.attrs...)...)
	s.d.Snapshots().Collect(ctx, fn.Name, sn.ID)
	return res, nil
}

// pullTarget is the function a pulled snapshot belongs to (created from
// the registry's record if this node does not have it: res says so) and
// the configuration the snapshot restores with (its version's, for a
// version); undo removes what it created, if the pull fails later.
func (s *Sync) pullTarget(ctx context.Context, rm *registry.RemoteManifest, local *snapshot.Manifest, code <-chan codeFetch,
	as *versionImport, res *wire.PullResult, steps *stepTimes) (fn, cfg *catalog.Function, undo func(), err error) {
	fn, err = s.d.Catalog.GetFunction(ctx, rm.Function)
	if errors.Is(err, catalog.ErrNotFound) {
		s.phase(ctx, "function")
		if fn, err = s.pullFunction(ctx, rm.Function, local.Inputs.Function.SHA256, code); err != nil {
			return nil, nil, nil, err
		}
		res.FunctionCreated = true
		steps.mark("function")
	} else if err != nil {
		return nil, nil, nil, err
	}
	undo = func() {
		if res.FunctionCreated {
			_ = s.d.Forget(context.WithoutCancel(ctx), fn.Name)
		} else if as != nil && as.builtCode {
			_ = os.RemoveAll(filepath.Dir(cfg.CodeDir))
		}
	}
	cfg = fn
	if as != nil {
		if cfg, err = s.versionConfig(ctx, as, fn, res.FunctionCreated); err != nil {
			cfg = fn
			undo()
			return nil, nil, nil, err
		}
	}
	return fn, cfg, undo, nil
}

// pullSource is the snapshot a pull fetches: the one asked for, or the
// newest of the function (or version) asked for, whose code then starts
// coming (code) if this node does not have the function; as is the
// version the snapshot is entered under, if it has one.
func (s *Sync) pullSource(ctx context.Context, req wire.PullRequest) (id string, code <-chan codeFetch, as *versionImport, err error) {
	if req.Snapshot != "" {
		return req.Snapshot, nil, nil, nil
	}
	rec, as, err := s.remoteRecord(ctx, req)
	if err != nil {
		return "", nil, nil, err
	}
	if _, err := s.d.Catalog.GetFunction(ctx, req.Function); errors.Is(err, catalog.ErrNotFound) {
		code = s.fetchCode(ctx, rec)
	}
	if err := s.d.CheckSnapshotID(rec.Latest); err != nil {
		return "", nil, nil, fmt.Errorf("%w: the registry's record of %s names %q", errdefs.ErrSnapshotUnusable, req.Function, rec.Latest)
	}
	return rec.Latest, code, as, nil
}

// completePull is a pull of snapshot sn, already here: a lazy one
// completes in place with a full pull; anything else exists.
func (s *Sync) completePull(ctx context.Context, sn *catalog.Snapshot, lazy bool, t0 time.Time) (*wire.PullResult, error) {
	if !sn.RemoteMemory || lazy {
		return nil, fmt.Errorf("%w: snapshot %s is already on this node", errdefs.ErrExists, sn.ID)
	}
	before := s.chunks.Stats()
	sn, err := s.CompleteSnapshot(ctx, sn.ID)
	if err != nil {
		return nil, err
	}
	after := s.chunks.Stats()
	return &wire.PullResult{Snapshot: s.d.SnapshotBody(sn), Completed: true, FetchedChunks: after.FetchedChunks - before.FetchedChunks,
		FetchedBytes: after.FetchedBytes - before.FetchedBytes, CachedChunks: after.Hits - before.Hits, PullMS: ms(time.Since(t0))}, nil
}

// CheckPull checks a pull request (before it starts as an operation).
func (s *Sync) CheckPull(req wire.PullRequest) error {
	if err := s.NeedRegistry(); err != nil {
		return err
	}
	switch {
	case (req.Snapshot == "") == (req.Function == ""):
		return fmt.Errorf("%w: give snapshot or function, not both or neither", errdefs.ErrInvalid)
	case req.Snapshot != "":
		return s.d.CheckSnapshotID(req.Snapshot)
	}
	return s.d.CheckName(req.Function)
}

// materialize writes rm into the snapshots directory and the catalog;
// lazy leaves the memory in the registry (a placeholder here); the remote
// files in warm start coming into the chunk cache once the others are here.
func (s *Sync) materialize(ctx context.Context, rm *registry.RemoteManifest, local *snapshot.Manifest, lazy bool, steps *stepTimes, warm []string) (*catalog.Snapshot, error) {
	tmp := filepath.Join(s.cfg.SnapshotsDir, ".tmp-"+rm.ID)
	final := filepath.Join(s.cfg.SnapshotsDir, rm.ID)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: snapshot %s is being pulled already", errdefs.ErrConflict, rm.ID)
		}
		return nil, err
	}
	skip := []string{registry.LayerPath} // in the layer store (Layers.Pull)
	if lazy {
		skip = append(skip, remoteFiles(rm)...)
	}
	err := s.chunks.PullExcept(ctx, rm, tmp, func(done, total int64) {
		s.report(ctx, wire.OperationProgress{Phase: "pulling", Done: done, Total: total, Unit: "bytes"})
	}, skip...)
	steps.mark("files")
	for _, f := range warm { // after the files the import waits for
		if err == nil && rm.File(f) != nil {
			s.chunks.Warm(rm, f)
		}
	}
	var stamp []byte
	switch {
	case err == nil && lazy:
		if err = writeLazy(tmp, rm); err == nil {
			s.phase(ctx, "verifying")
			_, err = snapshot.CheckLazy(tmp)
		}
	case err == nil:
		s.phase(ctx, "verifying")
		var st snapshot.Stamp
		if _, st, err = snapshot.Check(tmp, nil); err == nil {
			stamp, _ = json.Marshal(st)
		}
		if err == nil {
			err = s.d.Functions().ScanForSecrets(ctx, tmp, "snapshot "+rm.ID+" from the registry")
		}
	}
	steps.mark("verify")
	if err == nil {
		err = snapshot.SyncDir(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, Err(err)
	}
	_ = snapshot.SyncDir(s.cfg.SnapshotsDir)
	var size, disk int64
	for _, f := range rm.Files {
		size += f.Size
		disk += allocated(filepath.Join(final, filepath.FromSlash(f.Path)))
	}
	rec := &catalog.Snapshot{ID: rm.ID, Function: rm.Function, SourceVM: rm.SourceVM, Dir: final, MemoryMiB: local.Guest.MemoryMiB,
		SizeBytes: size, DiskBytes: disk, Stamp: string(stamp), CreatedAt: local.CreatedAt, Parent: rm.Parent, RemoteMemory: lazy}
	// The artifacts were verified against the registry's digests as written.
	if err := s.d.Snapshots().Enter(ctx, rec, rm.Prepared); err != nil {
		return nil, err
	}
	steps.mark("enter")
	return rec, nil
}

// stepTimes times the steps of a pull for its log line.
type stepTimes struct {
	at    time.Time
	attrs []any
}

// mark ends the step name, begun at the previous mark.
func (t *stepTimes) mark(name string) {
	now := time.Now()
	t.attrs = append(t.attrs, name+"_ms", ms(now.Sub(t.at)))
	t.at = now
}

// codeFetch is a function record and its code archive, or why they could
// not be fetched.
type codeFetch struct {
	rec  *registry.FunctionRecord
	code []byte
	err  error
}

// fetchCode fetches rec's code archive in the background.
func (s *Sync) fetchCode(ctx context.Context, rec *registry.FunctionRecord) <-chan codeFetch {
	out := make(chan codeFetch, 1)
	go func() {
		code, err := s.registry.GetCode(ctx, rec)
		out <- codeFetch{rec, code, err}
	}()
	return out
}

// pullFunction registers a function from the registry's record and code
// archive (fetched now, or by fetched if it is for this function); its
// code must digest to what the snapshot was taken with.
func (s *Sync) pullFunction(ctx context.Context, name, digest string, fetched <-chan codeFetch) (*catalog.Function, error) {
	var f codeFetch
	if fetched != nil {
		f = <-fetched
	}
	if f.rec == nil || f.rec.Name != name {
		rec, err := s.registry.GetFunction(ctx, name)
		if err != nil {
			return nil, Err(err)
		}
		f = codeFetch{rec: rec}
		if rec.Digest == digest {
			f.code, f.err = s.registry.GetCode(ctx, rec)
		}
	}
	rec := f.rec
	if rec.Digest != digest {
		return nil, fmt.Errorf("%w: the registry's function %s has other code than the snapshot was taken with", errdefs.ErrSnapshotUnusable, name)
	}
	if f.err != nil {
		return nil, Err(f.err)
	}
	fn, err := s.d.Functions().CreateFromRecord(ctx, name, rec, f.code)
	if err != nil {
		return nil, err
	}
	if fn.Digest != digest {
		_ = s.d.Forget(context.WithoutCancel(ctx), name)
		return nil, fmt.Errorf("%w: function %s from the registry digests to %s, the snapshot wants %s", errdefs.ErrSnapshotUnusable, name, fn.Digest[:12], digest[:12])
	}
	return fn, nil
}

// recordDeps is a function's deps as its registry record carries them.
func recordDeps(d *catalog.Deps) *registry.FunctionDeps {
	if d == nil {
		return nil
	}
	return &registry.FunctionDeps{Requested: d.Requested, Layer: registry.Layer{Digest: d.Layer, Format: d.Format,
		Lines: d.Resolved, SHA256: d.LayerSHA256, Bytes: d.LayerBytes}}
}
