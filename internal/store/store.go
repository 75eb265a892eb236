// Package store is thaw's snapshot memory store: a directory (or device) on
// a memory-speed tier holding copies of snapshot memory files that the
// premap strategy maps straight into restored VMs.
//
// PASS (seed 001, §3) keeps snapshot memory in byte-addressable persistent
// memory so a restore maps it instead of reading it. thaw's store lives on
// one of four tiers, chosen by what its path is (see Open):
//   - device-DAX: persistent memory as a character device (/dev/daxX.Y),
//     managed by thaw's own allocator as PASS does (devdax.go); the kernel
//     maps such a device only shared, so every restored VM gets a range of
//     its own filled from the stored copy;
//   - filesystem-DAX: persistent memory behind a filesystem mounted -o dax;
//   - hugetlbfs: DRAM in 2 MiB (or 1 GiB) huge pages, when the host has
//     configured a huge page pool; the copy then holds only the huge pages
//     with non-zero bytes, and restores map it in huge-page units;
//   - tmpfs: DRAM in 4 KiB pages (the default, /dev/shm/thaw-store).
//
// Snapshots are placed in the store explicitly; it never evicts on its own.
//
// File tiers' layout: <dir>/<snapshot-id>.mem is a sparse copy of the memory file (holes
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Kind is the tier a store lives on.
type Kind string

// Store kinds.
const (
	TmpFS     Kind = "tmpfs"     // DRAM (shared memory)
	HugeTLBFS Kind = "hugetlbfs" // DRAM in huge pages
	FSDAX     Kind = "fsdax"     // persistent memory behind a DAX-mounted filesystem
	// DevDAX (devdax.go): persistent memory as a device-DAX character device.
)

// DefaultDir holds the default stores, one per daemon data directory.
const DefaultDir = "/dev/shm/thaw-store"

// HugeMetaDir holds the entry descriptions of hugetlbfs stores.
const HugeMetaDir = "/dev/shm/thaw-store-meta"

// HugeMetaDirFor is where the entry descriptions of the hugetlbfs store at
// dir (an absolute path) live.
func HugeMetaDirFor(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(HugeMetaDir, hex.EncodeToString(sum[:6]))
}

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
	Snapshot string `json:"snapshot"`
	Path     string `json:"path"`
	Size     int64  `json:"size"`   // bytes of guest memory
	SHA256   string `json:"sha256"` // of every byte, holes as zeros
	Bytes    int64  `json:"bytes"`  // store memory it takes (allocated)
	Regions  int    `json:"regions"`
	// PageSize is the tier's page (bytes): the unit the copy is allocated
	// and mapped in. 4096 except on hugetlbfs.
	PageSize int64 `json:"page_size,omitempty"`
	// Extents are the copy's data regions where the tier cannot report
	// them itself (hugetlbfs has no SEEK_DATA; a device has no files).
	Extents []Extent `json:"extents,omitempty"`
	// DeviceOffset (devdax) is where the copy's units start on the
	// device, packed in the order of Extents.
	DeviceOffset int64     `json:"device_offset,omitempty"`
	StoredMS     float64   `json:"stored_ms"`
	StoredAt     time.Time `json:"stored_at"`
}

// Extent is a data region of a stored copy, in 4 KiB pages.
type Extent struct {
	Start uint64 `json:"start_page"`
	Pages uint64 `json:"pages"`
}

// Info is the store's state.
type Info struct {
	Dir           string `json:"dir"`
	Kind          Kind   `json:"kind"`
	PageSize      int64  `json:"page_size"`      // bytes per page of the tier
	CapacityBytes int64  `json:"capacity_bytes"` // of the filesystem (hugetlbfs: the huge page pool)
	FreeBytes     int64  `json:"free_bytes"`     // available on the filesystem (hugetlbfs: free, unreserved huge pages)
	UsedBytes     int64  `json:"used_bytes"`     // by thaw's entries
	// ReservedBytes is memory held for live premap clones beyond the
	// copies: on hugetlbfs the huge pages their private mappings reserve
	// for copy-on-write (a copy's size each), on devdax their own ranges of
	// the device (a copy's size each).
	ReservedBytes int64 `json:"reserved_bytes,omitempty"`
	// Clones (devdax) is the number of live clone ranges.
	Clones  int     `json:"clones,omitempty"`
	Entries []Entry `json:"entries"`
}

// Store is an opened store directory.
type Store struct {
	dir      string
	metaDir  string // where entry descriptions live: dir, except on hugetlbfs
	kind     Kind
	pageSize int64      // bytes
	mu       sync.Mutex // serializes Put and Remove
	dev      *daxDevice // devdax: the device; nil on file tiers
	notice   string     // something Open did that the operator should hear of
}

var idRe = regexp.MustCompile(`^[a-z]+-[0-9a-z]+$`)

// Open opens the store at dir and classifies its tier: a device-DAX
// character device is a device store; otherwise dir is a directory
// (created if needed). A directory on disk is refused: premap's point is
// that nothing is read from storage. A hugetlbfs mount is refused while its
// huge page pool is empty (huge pages not configured).
func Open(dir string) (*Store, error) {
	if sys, ok := isDAXDevice(dir); ok {
		return openDevDAX(dir, sys)
	}
	if strings.HasPrefix(filepath.Clean(dir), "/dev/dax") {
		return nil, fmt.Errorf("%w: %s is not a device-DAX character device (no such device, or not bound to device_dax)", ErrUnsupported, dir)
	}
	if err := ownDir(dir, filepath.Dir(filepath.Clean(dir)) == DefaultDir); err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
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
	pageSize := int64(memlayout.PageSize)
	switch {
	case st.Type == unix.TMPFS_MAGIC:
		kind = TmpFS
	case st.Type == unix.HUGETLBFS_MAGIC:
		kind, pageSize = HugeTLBFS, st.Bsize
		p, err := readPool(pageSize)
		if err != nil {
			return nil, fmt.Errorf("memory store %s: %w", abs, err)
		}
		if p.total == 0 {
			return nil, fmt.Errorf("%w: %s is hugetlbfs but no %d KiB huge pages are configured (vm.nr_hugepages is 0); "+
				"configure a pool (e.g. sysctl vm.nr_hugepages=1024) or use tmpfs", ErrUnsupported, abs, pageSize>>10)
		}
	case mountHasDAX(abs):
		kind = FSDAX
	default:
		return nil, fmt.Errorf("%w: %s is on a disk filesystem (type %#x); use tmpfs (e.g. /dev/shm), hugetlbfs or a filesystem mounted with -o dax", ErrUnsupported, abs, st.Type)
	}
	s := &Store{dir: abs, metaDir: abs, kind: kind, pageSize: pageSize}
	if kind == HugeTLBFS {
		// hugetlbfs files cannot be written with write(2): descriptions
		// live in shared memory, which a reboot clears with the copies.
		s.metaDir = HugeMetaDirFor(abs)
		if err := ownDir(s.metaDir, true); err != nil {
			return nil, fmt.Errorf("memory store %s: %w", abs, err)
		}
	}
	s.removeTemps()
	return s, nil
}

// ErrNotPrivate: a store directory (or the shared parent the daemon keeps
// its stores in) is not the daemon's alone.
var ErrNotPrivate = errors.New("directory is not private to thawd")

// ownDir makes sure dir is the daemon's alone: created 0700 if missing,
// otherwise it must be a real directory (never a symlink) owned by the
// daemon's user with no group or other permissions. Stores live in shared
// places such as /dev/shm, where another user could create the path first;
// such a directory is refused, never fixed up and used. With parent, dir's
// parent (the daemon's shared /dev/shm/thaw-store) is held to the same rule.
func ownDir(dir string, parent bool) error {
	up := filepath.Dir(filepath.Clean(dir))
	if parent {
		if err := ownDir(up, false); err != nil {
			return err
		}
	} else if err := safeParent(up); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err == nil {
		// A directory made here is private whatever the umask was.
		return os.Chmod(dir, 0o700)
	} else if !errors.Is(err, os.ErrExist) {
		if errors.Is(err, os.ErrNotExist) {
			return ownDir(dir, true)
		}
		return fmt.Errorf("%s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link", ErrNotPrivate, dir)
	case !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrNotPrivate, dir)
	case sys == nil || int(sys.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by uid %d, not thawd's (%d); remove it or choose another --store-dir", ErrNotPrivate, dir, sys.Uid, os.Geteuid())
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%w: %s has mode %04o; thawd wants 0700 (chmod 0700 %s if it is yours)", ErrNotPrivate, dir, st.Mode().Perm(), dir)
	}
	return nil
}

// safeParent checks that nobody but root and the daemon can replace
// entries of dir: owned by one of them, and writable by others only with
// the sticky bit, as /dev/shm and /tmp are.
func safeParent(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	if sys == nil || (sys.Uid != 0 && int(sys.Uid) != os.Geteuid()) {
		return fmt.Errorf("%w: %s, the parent of the store, is owned by another user", ErrNotPrivate, dir)
	}
	if st.Mode().Perm()&0o022 != 0 && (st.Mode()&os.ModeSticky == 0 || sys.Uid != 0) {
		return fmt.Errorf("%w: %s, the parent of the store, is writable by others", ErrNotPrivate, dir)
	}
	return nil
}

// Dir is the store's directory (devdax: the device).
func (s *Store) Dir() string { return s.dir }

// Notice is something Open did that the operator should hear of ("" if
// nothing): a device store re-formatted over a damaged index.
func (s *Store) Notice() string { return s.notice }

// Kind is the store's tier.
func (s *Store) Kind() Kind { return s.kind }

// PageSize is the tier's page size in bytes.
func (s *Store) PageSize() int64 { return s.pageSize }

func (s *Store) memPath(id string) string  { return filepath.Join(s.dir, id+".mem") }
func (s *Store) metaPath(id string) string { return filepath.Join(s.metaDir, id+".json") }

// MetaDir is where the entry descriptions of a store live (its own
// directory, or under HugeMetaDir for hugetlbfs).
func (s *Store) MetaDir() string { return s.metaDir }

// removeTemps drops what an interrupted Put left: temporary copies, and
// copies without a description (Put writes the description first); and on
// hugetlbfs, descriptions whose copy is gone (the mount was replaced).
func (s *Store) removeTemps() {
	if s.metaDir != s.dir {
		metas, _ := os.ReadDir(s.metaDir)
		for _, e := range metas {
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if _, err := os.Stat(s.memPath(id)); ok && errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(filepath.Join(s.metaDir, e.Name()))
			}
		}
	}
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		id, isMem := strings.CutSuffix(e.Name(), ".mem")
		_, err := os.Stat(s.metaPath(id))
		if strings.HasPrefix(e.Name(), ".tmp-") || (isMem && idRe.MatchString(id) && errors.Is(err, fs.ErrNotExist)) {
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
	if s.dev != nil {
		return s.dev.put(id, memPath, want)
	}
	if s.kind == HugeTLBFS {
		return s.putHuge(id, memPath, want)
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
	var regions []memlayout.PageRun
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
		Bytes: after.Blocks * 512, Regions: len(regions), PageSize: s.pageSize,
		StoredMS: float64(time.Since(start).Microseconds()) / 1000, StoredAt: time.Now().UTC()}
	return e, s.commit(tmp, e)
}

// commit writes e's description and moves the copy at tmp into place.
func (s *Store) commit(tmp string, e *Entry) error {
	id := e.Snapshot
	meta, _ := json.MarshalIndent(e, "", "  ")
	if err := os.WriteFile(s.metaPath(id), meta, 0o600); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(s.metaPath(id))
		return fmt.Errorf("memory store: %s: %w", id, err)
	}
	if err := os.Rename(tmp, e.Path); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(s.metaPath(id))
		return err
	}
	return nil
}

// fillGaps writes zeros into every hole shorter than mergeGap between
// two data extents of the file at path and returns the data regions after.
func fillGaps(path string, size int64) ([]memlayout.PageRun, error) {
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
func Extents(f *os.File, size int64) ([]memlayout.PageRun, error) {
	fd := int(f.Fd())
	var out []memlayout.PageRun
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
			out = append(out, memlayout.PageRun{Start: first, Pages: end - first})
		}
		off = hole
	}
	return out, nil
}

// Regions returns the data regions of a stored copy, in 4 KiB pages:
// recorded at Put on hugetlbfs, asked of the file (SEEK_DATA) elsewhere.
func (s *Store) Regions(e *Entry) ([]memlayout.PageRun, error) {
	if s.kind == HugeTLBFS || s.dev != nil {
		out := make([]memlayout.PageRun, len(e.Extents))
		for i, x := range e.Extents {
			out[i] = memlayout.PageRun{Start: x.Start, Pages: x.Pages}
		}
		return out, nil
	}
	f, err := os.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Extents(f, e.Size)
}

// Get returns the entry of a stored snapshot, ErrNotStored if there is none.
func (s *Store) Get(id string) (*Entry, error) {
	if !idRe.MatchString(id) {
		return nil, fmt.Errorf("memory store: invalid snapshot id %q", id)
	}
	return s.get(id)
}

func (s *Store) get(id string) (*Entry, error) {
	if s.dev != nil {
		s.dev.mu.Lock()
		defer s.dev.mu.Unlock()
		return s.dev.entry(id)
	}
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
	if s.dev != nil {
		return s.dev.remove(id)
	}
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
	if s.dev != nil {
		in := &Info{Dir: s.dir, Kind: s.kind, PageSize: s.pageSize, Entries: []Entry{}}
		s.dev.info(in)
		sort.Slice(in.Entries, func(i, j int) bool { return in.Entries[i].Snapshot < in.Entries[j].Snapshot })
		return in, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return nil, err
	}
	in := &Info{Dir: s.dir, Kind: s.kind, PageSize: s.pageSize, CapacityBytes: int64(st.Blocks) * st.Bsize,
		FreeBytes: int64(st.Bavail) * st.Bsize, Entries: []Entry{}}
	if s.kind == HugeTLBFS {
		p, err := readPool(s.pageSize)
		if err != nil {
			return nil, err
		}
		in.CapacityBytes, in.FreeBytes, in.ReservedBytes = p.total*s.pageSize, p.available()*s.pageSize, p.reserved*s.pageSize
		if lim := int64(st.Blocks); lim > 0 { // a size= limit on the mount
			in.CapacityBytes = min(in.CapacityBytes, lim*s.pageSize)
			in.FreeBytes = min(in.FreeBytes, int64(st.Bavail)*s.pageSize)
		}
	}
	ents, err := os.ReadDir(s.metaDir)
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
	if s.dev != nil {
		s.dev.mu.Lock()
		defer s.dev.mu.Unlock()
		return s.dev.freeBytes()
	}
	if s.kind == HugeTLBFS {
		in, err := s.Info()
		if err != nil {
			return -1
		}
		return in.FreeBytes
	}
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
