// Package store is thaw's snapshot memory store: a directory on a
// memory-speed tier holding copies of snapshot memory files that the premap
// strategy maps straight into restored VMs.
//
// PASS (seed 001, §3) keeps snapshot memory in byte-addressable persistent
// memory so a restore maps it instead of reading it. thaw's store is, in
// order of preference, a filesystem-DAX mount (persistent memory, as in
// PASS), hugetlbfs is deliberately not used (see Open), and otherwise tmpfs
// (DRAM, the default /dev/shm/thaw-store). Snapshots are placed in the store
// explicitly; the store never evicts on its own.
//
// Layout: <dir>/<snapshot-id>.mem is a sparse copy of the memory file (holes
// where the guest memory is zero), <dir>/<snapshot-id>.json its description.
// Small holes between data extents are filled with zeros when stored so a
// restore maps few, large file regions and a read fault never allocates
// store memory behind the caller's back: the store's use is fixed at Put.
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Kind is the tier a store lives on.
type Kind string

// Store kinds.
const (
	TmpFS Kind = "tmpfs" // DRAM (shared memory)
	FSDAX Kind = "fsdax" // persistent memory behind a DAX-mounted filesystem
)

// DefaultDir holds the default stores, one per daemon data directory.
const DefaultDir = "/dev/shm/thaw-store"

// DefaultDirFor is the default store of the daemon whose data directory is
// dataDir: a store belongs to one catalog, which removes the entries of
// snapshots it does not know.
func DefaultDirFor(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(DefaultDir, hex.EncodeToString(sum[:6]))
}

// mergeGap is the largest hole (bytes) between two data extents that Put
// fills so the extents map as one region: 64 KiB, FaaSnap's region merging
// (§4.5) in spirit, bounding the mappings to what vm.max_map_count allows.
const mergeGap = 64 << 10

// Errors.
var (
	// ErrNotStored: the snapshot has no copy in the store.
	ErrNotStored = errors.New("not in the memory store")
	// ErrFull: the store lacks room for a copy.
	ErrFull = errors.New("memory store full")
	// ErrUnsupported: the directory is not on a memory-speed tier.
	ErrUnsupported = errors.New("not a memory-speed store")
)

// Entry describes one stored snapshot memory file.
type Entry struct {
	Snapshot string    `json:"snapshot"`
	Path     string    `json:"path"`
	Size     int64     `json:"size"`   // bytes of guest memory
	SHA256   string    `json:"sha256"` // of every byte, holes as zeros
	Bytes    int64     `json:"bytes"`  // store memory it takes (allocated)
	Regions  int       `json:"regions"`
	StoredMS float64   `json:"stored_ms"`
	StoredAt time.Time `json:"stored_at"`
}

// Info is the store's state.
type Info struct {
	Dir           string  `json:"dir"`
	Kind          Kind    `json:"kind"`
	CapacityBytes int64   `json:"capacity_bytes"` // of the filesystem
	FreeBytes     int64   `json:"free_bytes"`     // available on the filesystem
	UsedBytes     int64   `json:"used_bytes"`     // by thaw's entries
	Entries       []Entry `json:"entries"`
}

// Store is an opened store directory.
type Store struct {
	dir  string
	kind Kind
	mu   sync.Mutex // serializes Put and Remove
}

var idRe = regexp.MustCompile(`^[a-z]+-[0-9a-z]+$`)

// Open opens (creating it if needed) the store at dir and classifies its
// tier. A directory on disk is refused: premap's point is that nothing is
// read from storage. hugetlbfs is refused too: the guest memory must be
// mapped with 4 KiB private copy-on-write granularity over an anonymous
// base (zero regions), which a hugetlbfs mapping cannot provide without
// turning every zero 2 MiB page into private memory of every clone.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("memory store %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(abs, &st); err != nil {
		return nil, fmt.Errorf("memory store %s: statfs: %w", abs, err)
	}
	var kind Kind
	switch {
	case st.Type == unix.TMPFS_MAGIC:
		kind = TmpFS
	case st.Type == unix.HUGETLBFS_MAGIC:
		return nil, fmt.Errorf("%w: %s is hugetlbfs; premap maps guest memory with 4 KiB copy-on-write pages over an anonymous base, which hugetlbfs cannot back (use tmpfs or a DAX filesystem)", ErrUnsupported, abs)
	case mountHasDAX(abs):
		kind = FSDAX
	default:
		return nil, fmt.Errorf("%w: %s is on a disk filesystem (type %#x); use tmpfs (e.g. /dev/shm) or a filesystem mounted with -o dax", ErrUnsupported, abs, st.Type)
	}
	s := &Store{dir: abs, kind: kind}
	s.removeTemps()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Kind is the store's tier.
func (s *Store) Kind() Kind { return s.kind }

func (s *Store) memPath(id string) string  { return filepath.Join(s.dir, id+".mem") }
func (s *Store) metaPath(id string) string { return filepath.Join(s.dir, id+".json") }

func (s *Store) removeTemps() {
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			_ = os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
}

// Put copies the snapshot memory file at memPath into the store as id.
// want is the file's description from the snapshot manifest: the copy is
// hashed while it is made and refused unless it matches. Nothing is left
// behind on failure (a full store included). Putting a stored snapshot
// again returns its entry.
func (s *Store) Put(id, memPath string, want snapshot.FileInfo) (*Entry, error) {
	if !idRe.MatchString(id) {
		return nil, fmt.Errorf("memory store: invalid snapshot id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, err := s.get(id); err == nil {
		return e, nil
	}
	// Room: the data plus filled gaps is at most the source's allocation
	// rounded up per extent; ask for the source's allocation plus 1/16.
	var src unix.Stat_t
	if err := unix.Stat(memPath, &src); err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	need := src.Blocks*512 + src.Blocks*512/16
	if free := s.free(); free >= 0 && need > free {
		return nil, fmt.Errorf("%w: storing %s needs about %d MiB, %d MiB free in %s", ErrFull, id, need>>20, free>>20, s.dir)
	}
	start := time.Now()
	tmp := filepath.Join(s.dir, ".tmp-"+id+".mem")
	_ = os.Remove(tmp)
	fi, err := snapshot.CopySparse(tmp, memPath)
	if err == nil && (fi.Size != want.Size || fi.SHA256 != want.SHA256) {
		err = fmt.Errorf("copy of %s does not match the snapshot manifest (size %d sha256 %.12s, want %d %.12s)",
			memPath, fi.Size, fi.SHA256, want.Size, want.SHA256)
	}
	var regions []memlayout.Region
	if err == nil {
		regions, err = fillGaps(tmp, fi.Size)
	}
	if err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, unix.ENOSPC) {
			return nil, fmt.Errorf("%w: storing %s: %v", ErrFull, id, err)
		}
		return nil, fmt.Errorf("memory store: %s: %w", id, err)
	}
	var after unix.Stat_t
	if err := unix.Stat(tmp, &after); err != nil {
		_ = os.Remove(tmp)
		return nil, err
	}
	e := &Entry{Snapshot: id, Path: s.memPath(id), Size: fi.Size, SHA256: fi.SHA256,
		Bytes: after.Blocks * 512, Regions: len(regions),
		StoredMS: float64(time.Since(start).Microseconds()) / 1000, StoredAt: time.Now().UTC()}
	meta, _ := json.MarshalIndent(e, "", "  ")
	if err := os.WriteFile(s.metaPath(id), meta, 0o600); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(s.metaPath(id))
		return nil, fmt.Errorf("memory store: %s: %w", id, err)
	}
	if err := os.Rename(tmp, e.Path); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(s.metaPath(id))
		return nil, err
	}
	return e, nil
}

// fillGaps writes zeros into every hole shorter than mergeGap between
// two data extents of the file at path and returns the data regions after.
func fillGaps(path string, size int64) ([]memlayout.Region, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ext, err := Extents(f, size)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(ext); i++ {
		gap := ext[i].Offset() - ext[i-1].Offset() - ext[i-1].Bytes()
		if gap > 0 && gap <= mergeGap {
			start := int64(ext[i-1].Offset() + ext[i-1].Bytes())
			// Written, not fallocated: tmpfs reports fallocated pages
			// as holes to SEEK_DATA until they are written.
			if _, err := f.WriteAt(make([]byte, gap), start); err != nil {
				return nil, fmt.Errorf("fill hole at %d: %w", start, err)
			}
		}
	}
	return Extents(f, size)
}

// Extents returns the data extents of f (SEEK_DATA/SEEK_HOLE), in pages,
// rounded out to whole pages.
func Extents(f *os.File, size int64) ([]memlayout.Region, error) {
	fd := int(f.Fd())
	var out []memlayout.Region
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole: %w", err)
		}
		hole = min(hole, size)
		first := uint64(data) / memlayout.PageSize
		end := (uint64(hole) + memlayout.PageSize - 1) / memlayout.PageSize
		if n := len(out); n > 0 && out[n-1].End() >= first {
			out[n-1].Pages = max(out[n-1].End(), end) - out[n-1].Start
		} else if end > first {
			out = append(out, memlayout.Region{Start: first, Pages: end - first})
		}
		off = hole
	}
	return out, nil
}

// Get returns the entry of a stored snapshot, ErrNotStored if there is none.
func (s *Store) Get(id string) (*Entry, error) {
	if !idRe.MatchString(id) {
		return nil, fmt.Errorf("memory store: invalid snapshot id %q", id)
	}
	return s.get(id)
}

func (s *Store) get(id string) (*Entry, error) {
	b, err := os.ReadFile(s.metaPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotStored)
	}
	if err != nil {
		return nil, err
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil || e.Snapshot != id {
		return nil, fmt.Errorf("memory store: %s: unreadable description %s", id, s.metaPath(id))
	}
	e.Path = s.memPath(id)
	var st unix.Stat_t
	if err := unix.Stat(e.Path, &st); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w (memory copy %s: %v)", id, ErrNotStored, e.Path, err)
	}
	if st.Size != e.Size {
		return nil, fmt.Errorf("memory store: %s: copy is %d bytes, want %d", id, st.Size, e.Size)
	}
	e.Bytes = st.Blocks * 512
	return &e, nil
}

// Remove drops a snapshot's copy; removing one that is not stored is not
// an error. VMs mapping the copy keep their pages until they exit.
func (s *Store) Remove(id string) error {
	if !idRe.MatchString(id) {
		return fmt.Errorf("memory store: invalid snapshot id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, p := range []string{s.metaPath(id), s.memPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Info reports capacity, use and entries.
func (s *Store) Info() (*Info, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return nil, err
	}
	in := &Info{Dir: s.dir, Kind: s.kind, CapacityBytes: int64(st.Blocks) * st.Bsize,
		FreeBytes: int64(st.Bavail) * st.Bsize, Entries: []Entry{}}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	for _, d := range ents {
		id, ok := strings.CutSuffix(d.Name(), ".json")
		if !ok || !idRe.MatchString(id) {
			continue
		}
		if e, err := s.get(id); err == nil {
			in.Entries = append(in.Entries, *e)
			in.UsedBytes += e.Bytes
		}
	}
	sort.Slice(in.Entries, func(i, j int) bool { return in.Entries[i].Snapshot < in.Entries[j].Snapshot })
	return in, nil
}

func (s *Store) free() int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}

// mountHasDAX reports whether the filesystem holding path is mounted with
// the dax option (/proc/self/mountinfo, longest matching mount point).
func mountHasDAX(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	best, dax := "", false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		mp := f[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best = mp
			opts := f[5]
			// super options follow the " - fstype source " separator
			for i, x := range f {
				if x == "-" && i+3 < len(f) {
					opts += "," + f[i+3]
				}
			}
			dax = false
			for _, o := range strings.Split(opts, ",") {
				if o == "dax" || o == "dax=always" {
					dax = true
				}
			}
		}
	}
	return dax
}
