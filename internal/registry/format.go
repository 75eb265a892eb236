package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/registry/chunk"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Chunk sizes: a power of two in [MinChunkSize, MaxChunkSize]. The default
// was chosen by `thaw bench chunks` (docs/results/chunks-*).
const (
	MinChunkSize     = chunk.MinSize
	MaxChunkSize     = chunk.MaxSize
	DefaultChunkSize = 512 << 10
)

// Remote format identification. A remote manifest is written in the
// oldest version that can say what it holds: 1, or 2 for a snapshot with
// a dependency layer (its "layer" and the file LayerPath), so readers of
// version 1 still read every snapshot without one.
const (
	RemoteMagic         = "thaw-remote-snapshot"
	RemoteFormatVersion = 2
	FunctionMagic       = "thaw-function"
)

// LayerPath is a snapshot's dependency layer among its remote files: the
// image its function's VMs attach (not a file of the snapshot directory;
// a pull puts it in the node's layer store).
const LayerPath = "deps/layer.img"

// Sentinel errors.
var (
	// ErrUnavailable: the object store did not answer (down, unreachable,
	// 5xx). Nothing local was changed.
	ErrUnavailable = errors.New("registry unavailable")
	// ErrNotFound: the store has no such snapshot, function or chunk.
	ErrNotFound = errors.New("not in the registry")
	// ErrCorrupt: an object's content does not match its name or digest
	// (after the bounded refetches).
	ErrCorrupt = chunk.ErrCorrupt
	// ErrInvalid: a remote manifest or record that fails its checks.
	ErrInvalid = errors.New("registry manifest invalid")
	// ErrBusy: a garbage collection could not start because pushes kept
	// running past its wait.
	ErrBusy = errors.New("registry busy")
)

// ChunkRef is one stored chunk of a file: its index (offset = Index *
// chunk size), the SHA-256 of its uncompressed bytes and the size of its
// compressed object. Chunks not listed are all zeros (holes).
type ChunkRef struct {
	Index  int64  `json:"i"`
	SHA256 string `json:"sha256"`
	Stored int64  `json:"stored"`
}

// RemoteFile is one file of a pushed snapshot.
type RemoteFile struct {
	Path   string     `json:"path"` // relative to the snapshot directory
	Size   int64      `json:"size"`
	SHA256 string     `json:"sha256"` // every byte, holes as zeros
	Chunks []ChunkRef `json:"chunks"`
}

// RemoteManifest is snapshots/<id>/manifest.json in the bucket.
type RemoteManifest struct {
	Magic         string    `json:"magic"`
	FormatVersion int       `json:"format_version"`
	ID            string    `json:"id"`
	Function      string    `json:"function"`
	ChunkSize     int64     `json:"chunk_size"`
	PushedAt      time.Time `json:"pushed_at"`
	// Manifest is the snapshot's own manifest.json, byte for byte.
	Manifest json.RawMessage `json:"manifest"`
	// SourceVM, Parent and Prepared are the catalog's record of the
	// snapshot: the VM it was taken of, the clean snapshot a warm one was
	// recorded from, and the prepare result of a warm one.
	SourceVM string          `json:"source_vm,omitempty"`
	Parent   string          `json:"parent,omitempty"`
	Prepared json.RawMessage `json:"prepared,omitempty"`
	Files    []RemoteFile    `json:"files"`
	// Prefetch lists the paths of files a node fetches first: FaaSnap's
	// loading set and REAP's working set.
	Prefetch []string `json:"prefetch,omitempty"`
	// Layer describes the dependency layer in LayerPath (version 2).
	Layer    *Layer `json:"layer,omitempty"`
	Checksum string `json:"checksum"`
}

// Layer is a dependency layer as the registry carries it: what a node
// needs to put the image in its layer store (package deps checks that the
// digest is the lines' in the format).
type Layer struct {
	Digest string   `json:"digest"`
	Format string   `json:"format"`
	Lines  []string `json:"lines"`
	SHA256 string   `json:"sha256"` // of the image: the snapshot's inputs.deps
	Bytes  int64    `json:"bytes"`
}

// FunctionDeps are a function's dependencies in its record: a node
// creating the function from the registry uses them as they are (no
// resolution) with the layer a pull brought.
type FunctionDeps struct {
	Requested []string `json:"requested"`
	Layer
}

func (l *Layer) check() error {
	if l == nil {
		return nil
	}
	if !hexSum.MatchString(l.Digest) || !hexSum.MatchString(l.SHA256) || l.Bytes <= 0 || len(l.Lines) == 0 ||
		(l.Format != "erofs" && l.Format != "ext4") {
		return fmt.Errorf("%w: dependency layer %q", ErrInvalid, l.Digest)
	}
	return nil
}

// FunctionRecord is functions/<name>.json: what a node needs to register a
// function it never saw, and the newest snapshot pushed for it.
type FunctionRecord struct {
	Magic          string   `json:"magic"`
	Name           string   `json:"name"`
	Digest         string   `json:"digest"` // SHA-256 of the code tree (snapshot inputs.function)
	Code           string   `json:"code"`   // object key of the code archive (tar.gz)
	CodeSHA256     string   `json:"code_sha256"`
	MemoryMiB      int      `json:"memory_mib"`
	VCPUs          int      `json:"vcpus"`
	Egress         string   `json:"egress,omitempty"`
	Services       []string `json:"services,omitempty"`
	MaxConcurrency int      `json:"max_concurrency,omitempty"`
	KeepAliveS     int      `json:"keep_alive_s,omitempty"`
	VMMPool        int      `json:"vmm_pool,omitempty"`
	VMMPoolTTLS    int      `json:"vmm_pool_ttl_s,omitempty"`
	// Env is the function's environment (its digest covers it); Secrets
	// its secret references (env name -> secret name): the names only,
	// a node that imports the function must hold the secrets itself.
	Env     map[string]string `json:"env,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// Deps are the function's dependencies, if it has a requirements.txt.
	Deps *FunctionDeps `json:"deps,omitempty"`
	// Latest is the id of the newest snapshot pushed for the function
	// (by the time it was taken: LatestCreatedAt).
	Latest string `json:"latest"`
	// Version is the version Latest belongs to (versions/<name>/<n>.json
	// holds it whole); 0: a snapshot made by hand.
	Version         int       `json:"version,omitempty"`
	LatestCreatedAt time.Time `json:"latest_created_at"`
	PushedAt        time.Time `json:"pushed_at"`
}

// Object keys.
func chunkKey(sum string) string               { return "chunks/" + sum[:2] + "/" + sum }
func manifestKey(id string) string             { return "snapshots/" + id + "/manifest.json" }
func functionKey(name string) string           { return "functions/" + name + ".json" }
func codeKey(sum string) string                { return "code/" + sum + ".tar.gz" }
func (f *RemoteFile) chunkLen(i, cs int64) int { return int(min(cs, f.Size-i*cs)) }

var (
	hexSum = regexp.MustCompile(`^[0-9a-f]{64}$`)
	idRE   = regexp.MustCompile(`^snap-[0-9a-z]{1,64}$`)
	nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
)

func (m *RemoteManifest) computeChecksum() string {
	c := *m
	c.Checksum = ""
	b, _ := json.Marshal(&c)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// version is the format version m is written in.
func (m *RemoteManifest) version() int {
	if m.Layer != nil {
		return 2
	}
	return 1
}

// Encode seals the manifest with its checksum.
func (m *RemoteManifest) Encode() ([]byte, error) {
	m.Magic, m.FormatVersion = RemoteMagic, m.version()
	m.Checksum = m.computeChecksum()
	return json.Marshal(m)
}

// DecodeRemoteManifest parses and checks a remote manifest: magic, version,
// checksum, the embedded snapshot manifest, and every file and chunk entry
// (paths inside the snapshot, chunk indexes in range and increasing), so a
// hostile bucket cannot make a node write outside a snapshot directory.
func DecodeRemoteManifest(b []byte) (*RemoteManifest, error) {
	var m RemoteManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if m.Magic != RemoteMagic {
		return nil, fmt.Errorf("%w: magic %q, want %q", ErrInvalid, m.Magic, RemoteMagic)
	}
	if m.FormatVersion < 1 || m.FormatVersion > RemoteFormatVersion {
		return nil, fmt.Errorf("%w: format version %d, this thaw reads up to %d", ErrInvalid, m.FormatVersion, RemoteFormatVersion)
	}
	if m.Checksum != m.computeChecksum() {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrInvalid)
	}
	if m.FormatVersion != m.version() {
		return nil, fmt.Errorf("%w: format version %d with a manifest of version %d", ErrInvalid, m.FormatVersion, m.version())
	}
	if err := m.Layer.check(); err != nil {
		return nil, err
	}
	if m.ChunkSize < MinChunkSize || m.ChunkSize > MaxChunkSize {
		return nil, fmt.Errorf("%w: chunk size %d", ErrInvalid, m.ChunkSize)
	}
	local, err := snapshot.DecodeManifest(m.Manifest)
	if err != nil {
		return nil, fmt.Errorf("%w: embedded manifest: %v", ErrInvalid, err)
	}
	if local.ID != m.ID || local.Function != m.Function || !idRE.MatchString(m.ID) || !nameRE.MatchString(m.Function) {
		return nil, fmt.Errorf("%w: id %q / function %q do not match the embedded manifest", ErrInvalid, m.ID, m.Function)
	}
	if err := m.checkLayer(local.Inputs.Deps); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i := range m.Files {
		if err := m.Files[i].check(m.ChunkSize); err != nil {
			return nil, err
		}
		if seen[m.Files[i].Path] {
			return nil, fmt.Errorf("%w: file %s listed twice", ErrInvalid, m.Files[i].Path)
		}
		seen[m.Files[i].Path] = true
	}
	for name, fi := range local.Files {
		f := m.File(name)
		if f == nil || f.Size != fi.Size || f.SHA256 != fi.SHA256 {
			return nil, fmt.Errorf("%w: %s differs from the embedded manifest", ErrInvalid, name)
		}
	}
	if m.File(snapshot.ManifestFile) == nil {
		return nil, fmt.Errorf("%w: no %s", ErrInvalid, snapshot.ManifestFile)
	}
	for _, p := range m.Prefetch {
		if !seen[p] {
			return nil, fmt.Errorf("%w: prefetch file %s is not listed", ErrInvalid, p)
		}
	}
	return &m, nil
}

func (f *RemoteFile) check(cs int64) error {
	p := f.Path
	if p == "" || path.Clean(p) != p || path.IsAbs(p) || strings.HasPrefix(p, "..") || strings.HasPrefix(path.Base(p), ".") {
		return fmt.Errorf("%w: file path %q", ErrInvalid, p)
	}
	if p != snapshot.ManifestFile && p != snapshot.StateFile && p != snapshot.MemoryFile && p != LayerPath {
		if parts := strings.Split(p, "/"); len(parts) != 3 || parts[0] != "strategies" {
			return fmt.Errorf("%w: file path %q is not a snapshot file", ErrInvalid, p)
		}
	}
	if f.Size < 0 || !hexSum.MatchString(f.SHA256) {
		return fmt.Errorf("%w: file %s: size or digest", ErrInvalid, p)
	}
	n := (f.Size + cs - 1) / cs
	last := int64(-1)
	for _, c := range f.Chunks {
		if c.Index <= last || c.Index >= n || !hexSum.MatchString(c.SHA256) || c.Stored <= 0 {
			return fmt.Errorf("%w: file %s: chunk %d", ErrInvalid, p, c.Index)
		}
		last = c.Index
	}
	return nil
}

// checkLayer: a layer, its file and the snapshot's inputs.deps come
// together and agree.
func (m *RemoteManifest) checkLayer(input *snapshot.Digest) error {
	f := m.File(LayerPath)
	switch {
	case m.Layer == nil && f == nil && input == nil:
		return nil
	case m.Layer == nil || f == nil || input == nil:
		return fmt.Errorf("%w: the dependency layer, its file and the snapshot's inputs.deps must come together", ErrInvalid)
	case f.Size != m.Layer.Bytes || f.SHA256 != m.Layer.SHA256 || input.SHA256 != m.Layer.SHA256:
		return fmt.Errorf("%w: the dependency layer's file, description and the snapshot's inputs.deps differ", ErrInvalid)
	}
	return nil
}

// File returns the entry of path, or nil.
func (m *RemoteManifest) File(p string) *RemoteFile {
	for i := range m.Files {
		if m.Files[i].Path == p {
			return &m.Files[i]
		}
	}
	return nil
}

// LocalManifest decodes the embedded snapshot manifest.
func (m *RemoteManifest) LocalManifest() (*snapshot.Manifest, error) {
	return snapshot.DecodeManifest(m.Manifest)
}

// Bytes sums the stored (compressed) sizes and the uncompressed non-zero
// bytes of the manifest's chunks, each distinct chunk once.
func (m *RemoteManifest) Bytes() (stored, data int64) {
	m.eachDistinct(func(f *RemoteFile, c ChunkRef) {
		stored += c.Stored
		data += int64(f.chunkLen(c.Index, m.ChunkSize))
	})
	return stored, data
}

// ChunkSums lists the manifest's distinct chunk digests.
func (m *RemoteManifest) ChunkSums() []string {
	var out []string
	m.eachDistinct(func(_ *RemoteFile, c ChunkRef) { out = append(out, c.SHA256) })
	return out
}

// eachDistinct calls fn for the first reference to every distinct chunk.
func (m *RemoteManifest) eachDistinct(fn func(*RemoteFile, ChunkRef)) {
	seen := map[string]bool{}
	for i := range m.Files {
		for _, c := range m.Files[i].Chunks {
			if !seen[c.SHA256] {
				seen[c.SHA256] = true
				fn(&m.Files[i], c)
			}
		}
	}
}

// decodeFunctionRecord checks a function record.
func decodeFunctionRecord(b []byte) (*FunctionRecord, error) {
	var r FunctionRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: function record: %v", ErrInvalid, err)
	}
	if r.Magic != FunctionMagic || !nameRE.MatchString(r.Name) || !hexSum.MatchString(r.Digest) ||
		!hexSum.MatchString(r.CodeSHA256) || r.Code != codeKey(r.CodeSHA256) || !idRE.MatchString(r.Latest) {
		return nil, fmt.Errorf("%w: function record %q", ErrInvalid, r.Name)
	}
	if r.Deps != nil {
		if err := r.Deps.Layer.check(); err != nil {
			return nil, fmt.Errorf("function record %q: %w", r.Name, err)
		}
	}
	return &r, nil
}
