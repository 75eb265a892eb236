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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
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

// Entry describes one stored snapshot memory file (part of the API).
type Entry = wire.StoreEntry

// Extent is a data region of a stored copy, in 4 KiB pages.
type Extent = wire.StoreExtent

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

// Store is an opened store: a tier, chosen once by Open.
type Store struct {
	dir      string
	kind     Kind
	pageSize int64      // bytes
	mu       sync.Mutex // serializes Put, Remove and Close
	t        tier
	metaDir  string // where entry descriptions live (file tiers)
	notice   string // something Open did that the operator should hear of
	created  bool   // Open made the directory (RemoveIfEmpty)
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
	_, statErr := os.Lstat(dir)
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
	files := fileTier{dir: abs, metaDir: abs, pageSize: pageSize}
	var t tier = &files
	if kind == HugeTLBFS {
		// hugetlbfs files cannot be written with write(2): descriptions
		// live in shared memory, which a reboot clears with the copies.
		files.metaDir = HugeMetaDirFor(abs)
		if err := ownDir(files.metaDir, true); err != nil {
			return nil, fmt.Errorf("memory store %s: %w", abs, err)
		}
		t = &hugeTier{files}
	}
	files.removeTemps()
	return &Store{dir: abs, kind: kind, pageSize: pageSize, t: t, metaDir: files.metaDir,
		created: errors.Is(statErr, os.ErrNotExist)}, nil
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

// MetaDir is where the entry descriptions of a store live (its own
// directory, or under HugeMetaDir for hugetlbfs; none for a device).
func (s *Store) MetaDir() string { return s.metaDir }

// Put copies the snapshot memory file at memPath into the store as id.
// want is the file's description from the snapshot manifest: the copy is
// hashed while it is made and refused unless it matches; a copy this
// process stored counts as verified. Nothing is left behind on failure (a
// full store included). Putting a stored snapshot again returns its entry.
func (s *Store) Put(id, memPath string, want snapshot.FileInfo) (*Entry, error) {
	if !idRe.MatchString(id) {
		return nil, fmt.Errorf("memory store: invalid snapshot id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, err := s.t.get(id); err == nil {
		return e, nil
	}
	return s.t.put(id, memPath, want)
}

// Get returns the entry of a stored snapshot, ErrNotStored if there is none.
func (s *Store) Get(id string) (*Entry, error) {
	if !idRe.MatchString(id) {
		return nil, fmt.Errorf("memory store: invalid snapshot id %q", id)
	}
	return s.t.get(id)
}

// Remove drops a snapshot's copy; removing one that is not stored is not
// an error. VMs mapping the copy keep their pages until they exit.
func (s *Store) Remove(id string) error {
	if !idRe.MatchString(id) {
		return fmt.Errorf("memory store: invalid snapshot id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.remove(id)
}

// Info reports capacity, use and entries.
func (s *Store) Info() (*Info, error) {
	in := &Info{Dir: s.dir, Kind: s.kind, PageSize: s.pageSize, Entries: []Entry{}}
	if err := s.t.info(in); err != nil {
		return nil, err
	}
	sort.Slice(in.Entries, func(i, j int) bool { return in.Entries[i].Snapshot < in.Entries[j].Snapshot })
	return in, nil
}

// Regions returns the data regions of a stored copy, in 4 KiB pages.
func (s *Store) Regions(e *Entry) ([]memlayout.PageRun, error) { return s.t.regions(e) }

// Verify re-hashes a stored copy against its entry unless this process
// verified it already (file tiers: and its stamp has not changed since).
func (s *Store) Verify(e *Entry) error { return s.t.verify(e) }

// Map lays out how VM owner maps the stored copy e. Release what it holds
// only once the VM's process has exited.
func (s *Store) Map(e *Entry, owner string) (*Mapping, error) { return s.t.mapping(e, owner) }

// Clones lists the VMs holding private ranges of the store (devdax).
func (s *Store) Clones() []string { return s.t.owners() }

// Close releases the store's medium (a device's mapping and lock) once no
// Put is running; later calls fail with "closed".
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.close()
}

// extentRuns are the extents an entry recorded, as page runs.
func extentRuns(e *Entry) []memlayout.PageRun {
	out := make([]memlayout.PageRun, len(e.Extents))
	for i, x := range e.Extents {
		out[i] = memlayout.PageRun{Start: x.Start, Pages: x.Pages}
	}
	return out
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
