package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/registry/chunk"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// pushWorkers is how many chunks are compressed and uploaded at once.
const pushWorkers = 4

// Progress receives a push's or pull's progress in bytes of snapshot files
// (apparent sizes: holes count as done when passed).
type Progress func(done, total int64)

// PushInfo is what the catalog knows of a snapshot beyond its files.
type PushInfo struct {
	SourceVM string
	Parent   string
	Prepared json.RawMessage
	// Layer is the snapshot's dependency layer, pushed as LayerPath from
	// LayerFile (nil: none).
	Layer     *Layer
	LayerFile string
}

// PushStats says what a push did.
type PushStats struct {
	Chunks        int   `json:"chunks"`         // distinct non-zero chunks of the snapshot
	Uploaded      int   `json:"uploaded"`       // chunks that were not in the store yet
	UploadedBytes int64 `json:"uploaded_bytes"` // their stored (compressed) bytes
	StoredBytes   int64 `json:"stored_bytes"`   // stored bytes of all distinct chunks of the snapshot
	DataBytes     int64 `json:"data_bytes"`     // uncompressed bytes of those chunks
}

// isPrefetch says whether a snapshot file is a strategy's data file read
// first on restore (FaaSnap's loading set, REAP's working set).
func isPrefetch(rel string) bool {
	return strings.HasPrefix(rel, "strategies/") && !strings.HasSuffix(rel, ".json")
}

// Push uploads the snapshot in dir: every non-zero chunk the store does not
// have yet, then the remote manifest, last, so a manifest is only ever
// visible with all its chunks. An interrupted push run again skips the
// chunks already stored. The files are hashed while they are read and
// must match the snapshot's manifest.
func (s *Store) Push(ctx context.Context, dir string, info PushInfo, progress Progress) (*RemoteManifest, PushStats, error) {
	var st PushStats
	if err := s.canSign(); err != nil {
		return nil, st, err
	}
	src, err := pushSources(dir, info)
	if err != nil {
		return nil, st, err
	}
	l, err := s.pushLease(ctx, src.local.ID)
	if err != nil {
		return nil, st, err
	}
	defer l.release()
	local := src.local
	rm := &RemoteManifest{ID: local.ID, Function: local.Function, ChunkSize: s.ChunkSize(), PushedAt: time.Now().UTC(),
		Manifest: src.raw, SourceVM: info.SourceVM, Parent: info.Parent, Prepared: info.Prepared, Layer: info.Layer}
	up := newUploader(ctx, s, &st)
	var done int64
	for _, rel := range src.files {
		rf, err := src.push(rel, rm.ChunkSize, up, info.Layer, func(at int64) {
			if progress != nil {
				progress(done+at, src.total)
			}
		})
		if err != nil {
			up.wait()
			return nil, st, err
		}
		rm.Files = append(rm.Files, rf)
		if isPrefetch(rel) {
			rm.Prefetch = append(rm.Prefetch, rel)
		}
		done += rf.Size
	}
	if err := up.wait(); err != nil {
		return nil, st, fmt.Errorf("push %s: %w", local.ID, err)
	}
	// Stored sizes are known once every upload has finished.
	for i := range rm.Files {
		for j := range rm.Files[i].Chunks {
			rm.Files[i].Chunks[j].Stored = up.storedSize(rm.Files[i].Chunks[j].SHA256)
		}
	}
	st.Chunks = len(rm.ChunkSums())
	st.StoredBytes, st.DataBytes = rm.Bytes()
	b, err := rm.Encode()
	if err != nil {
		return nil, st, err
	}
	if err := s.PutRecord(ctx, KindManifest, manifestKey(rm.ID), b); err != nil {
		return nil, st, fmt.Errorf("push %s: manifest: %w", rm.ID, err)
	}
	if progress != nil {
		progress(src.total, src.total)
	}
	return rm, st, nil
}

// pushSource is what a push sends: the snapshot's manifest, its files
// (and its dependency layer's image) by remote path, and their bytes.
type pushSource struct {
	local *snapshot.Manifest
	raw   []byte
	files []string
	src   map[string]string // remote path -> file here
	total int64
}

func pushSources(dir string, info PushInfo) (*pushSource, error) {
	local, err := snapshot.ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, snapshot.ManifestFile))
	if err != nil {
		return nil, err
	}
	files, err := chunk.SnapshotFiles(dir)
	if err != nil {
		return nil, err
	}
	p := &pushSource{local: local, raw: raw, files: files, src: map[string]string{}}
	for _, f := range files {
		p.src[f] = filepath.Join(dir, f)
	}
	if info.Layer != nil {
		if local.Inputs.Deps == nil || local.Inputs.Deps.SHA256 != info.Layer.SHA256 {
			return nil, fmt.Errorf("push %s: %w: the dependency layer given is not the snapshot's", local.ID, snapshot.ErrCorrupt)
		}
		p.files = append(p.files, LayerPath)
		p.src[LayerPath] = info.LayerFile
	}
	for _, f := range p.files {
		if fi, err := os.Stat(p.src[f]); err == nil {
			p.total += fi.Size()
		}
	}
	return p, nil
}

// push cuts file rel into chunks for up and returns its remote entry once
// its bytes are checked against what the manifest (or the layer) says;
// at tells how far into the file the push is.
func (p *pushSource) push(rel string, cs int64, up *uploader, layer *Layer, at func(int64)) (RemoteFile, error) {
	rf := RemoteFile{Path: rel}
	size, sum, err := chunk.Scan(p.src[rel], cs, func(idx int64, data []byte) error {
		ref := ChunkRef{Index: idx, SHA256: chunk.SumHex(data)}
		rf.Chunks = append(rf.Chunks, ref)
		at(idx * cs)
		return up.add(ref.SHA256, data)
	})
	if err != nil {
		return rf, fmt.Errorf("push %s: %w", rel, err)
	}
	rf.Size, rf.SHA256 = size, sum
	if want, ok := p.local.Files[rel]; ok && (want.Size != size || want.SHA256 != sum) {
		return rf, fmt.Errorf("push %s: %w: %s changed or is damaged (its digest differs from the manifest)", p.local.ID, snapshot.ErrCorrupt, rel)
	}
	if rel == LayerPath && (size != layer.Bytes || sum != layer.SHA256) {
		return rf, fmt.Errorf("push %s: %w: the dependency layer changed or is damaged", p.local.ID, snapshot.ErrCorrupt)
	}
	return rf, nil
}

// uploader compresses and uploads chunks with a few workers, each
// distinct chunk once.
type uploader struct {
	ctx    context.Context
	cancel context.CancelFunc
	s      *Store
	st     *PushStats
	work   chan upChunk
	wg     sync.WaitGroup
	mu     sync.Mutex
	sizes  map[string]int64 // chunk -> stored size (-1 while in flight)
	err    error
	failed atomic.Bool
}

type upChunk struct {
	sum  string
	data []byte
}

func newUploader(ctx context.Context, s *Store, st *PushStats) *uploader {
	ctx, cancel := context.WithCancel(ctx)
	u := &uploader{ctx: ctx, cancel: cancel, s: s, st: st, work: make(chan upChunk), sizes: map[string]int64{}}
	for range pushWorkers {
		u.wg.Add(1)
		go u.run()
	}
	return u
}

func (u *uploader) run() {
	defer u.wg.Done()
	var buf []byte
	for c := range u.work {
		if u.failed.Load() {
			continue
		}
		size, sent, err := u.s.putChunk(u.ctx, c.sum, c.data, &buf)
		u.mu.Lock()
		if err != nil && u.err == nil {
			u.err = err
			u.failed.Store(true)
			u.cancel()
		}
		u.sizes[c.sum] = size
		if sent {
			u.st.Uploaded++
			u.st.UploadedBytes += size
		}
		u.mu.Unlock()
	}
}

// add queues a chunk (data is copied) unless it was queued before.
func (u *uploader) add(sum string, data []byte) error {
	if u.failed.Load() {
		return u.errNow()
	}
	u.mu.Lock()
	_, seen := u.sizes[sum]
	if !seen {
		u.sizes[sum] = -1
	}
	u.mu.Unlock()
	if seen {
		return nil
	}
	select {
	case u.work <- upChunk{sum: sum, data: append([]byte(nil), data...)}:
		return nil
	case <-u.ctx.Done():
		return u.errNow()
	}
}

func (u *uploader) errNow() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err != nil {
		return u.err
	}
	return u.ctx.Err()
}

// wait ends the workers and returns the first error.
func (u *uploader) wait() error {
	if u.work != nil {
		close(u.work)
		u.wg.Wait()
		u.work = nil
	}
	u.cancel()
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

func (u *uploader) storedSize(sum string) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sizes[sum]
}

// PushFunction stores a function's code archive (unless present) and its
// record, naming latest as its newest snapshot.
func (s *Store) PushFunction(ctx context.Context, rec FunctionRecord, code []byte) error {
	if err := s.canSign(); err != nil {
		return err
	}
	rec.Magic = FunctionMagic
	rec.CodeSHA256 = chunk.SumHex(code)
	rec.Code = codeKey(rec.CodeSHA256)
	rec.PushedAt = time.Now().UTC()
	l, err := s.pushLease(ctx, "function "+rec.Name)
	if err != nil {
		return err
	}
	defer l.release()
	if err := s.putCode(ctx, rec.Code, code); err != nil {
		return err
	}
	b, err := encodeChecked(rec, decodeFunctionRecord)
	if err != nil {
		return err
	}
	return s.PutRecord(ctx, KindFunction, functionKey(rec.Name), b)
}

// putCode stores a code archive under key unless it is there already.
func (s *Store) putCode(ctx context.Context, key string, code []byte) error {
	ok, err := s.exists(ctx, key)
	if err != nil || ok {
		return err
	}
	return s.put(ctx, key, code, "application/gzip")
}

// encodeChecked is v's JSON, once decode (what its readers run) accepts it.
func encodeChecked[T any](v any, decode func([]byte) (T, error)) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if _, err := decode(b); err != nil {
		return nil, err
	}
	return b, nil
}
