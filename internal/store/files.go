package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// fileTier keeps copies as sparse files in a directory on tmpfs or an
// fs-DAX filesystem: <dir>/<id>.mem and its description <metaDir>/<id>.json.
type fileTier struct {
	dir      string
	metaDir  string // dir, except on hugetlbfs
	pageSize int64
}

func (f *fileTier) memPath(id string) string  { return filepath.Join(f.dir, id+".mem") }
func (f *fileTier) metaPath(id string) string { return filepath.Join(f.metaDir, id+".json") }

// removeTemps drops what an interrupted Put left: temporary copies, and
// copies without a description (Put writes the description first); and on
// hugetlbfs, descriptions whose copy is gone (the mount was replaced).
func (f *fileTier) removeTemps() {
	if f.metaDir != f.dir {
		metas, _ := os.ReadDir(f.metaDir)
		for _, e := range metas {
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if _, err := os.Stat(f.memPath(id)); ok && errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(filepath.Join(f.metaDir, e.Name()))
			}
		}
	}
	ents, _ := os.ReadDir(f.dir)
	for _, e := range ents {
		id, isMem := strings.CutSuffix(e.Name(), ".mem")
		_, err := os.Stat(f.metaPath(id))
		if strings.HasPrefix(e.Name(), ".tmp-") || (isMem && idRe.MatchString(id) && errors.Is(err, fs.ErrNotExist)) {
			_ = os.Remove(filepath.Join(f.dir, e.Name()))
		}
	}
}

// put makes a sparse copy, hashed while copying, and fills small holes.
func (f *fileTier) put(id, memPath string, want snapshot.FileInfo) (*Entry, error) {
	// Room: the data plus filled gaps is at most the source's allocation
	// rounded up per extent; ask for the source's allocation plus 1/16.
	var src unix.Stat_t
	if err := unix.Stat(memPath, &src); err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	need := src.Blocks*512 + src.Blocks*512/16
	if free := f.statfsFree(); free >= 0 && need > free {
		return nil, fmt.Errorf("%w: storing %s needs about %d MiB, %d MiB free in %s", ErrFull, id, need>>20, free>>20, f.dir)
	}
	start := time.Now()
	tmp := filepath.Join(f.dir, ".tmp-"+id+".mem")
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
	e := &Entry{Snapshot: id, Size: fi.Size, SHA256: fi.SHA256, Regions: len(regions), PageSize: f.pageSize}
	return e, f.commit(tmp, e, start)
}

// commit records what a copy at tmp allocates, writes e's description,
// moves the copy into place and trusts it (it was hashed while written).
func (f *fileTier) commit(tmp string, e *Entry, start time.Time) error {
	id := e.Snapshot
	var st unix.Stat_t
	if err := unix.Stat(tmp, &st); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	e.Path, e.Bytes = f.memPath(id), st.Blocks*512
	e.StoredMS, e.StoredAt = float64(time.Since(start).Microseconds())/1000, time.Now().UTC()
	meta, _ := json.MarshalIndent(e, "", "  ")
	if err := os.WriteFile(f.metaPath(id), meta, 0o600); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(f.metaPath(id))
		return fmt.Errorf("memory store: %s: %w", id, err)
	}
	if err := os.Rename(tmp, e.Path); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(f.metaPath(id))
		return err
	}
	return snapshot.Trust(e.Path)
}

func (f *fileTier) get(id string) (*Entry, error) {
	b, err := os.ReadFile(f.metaPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotStored)
	}
	if err != nil {
		return nil, err
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil || e.Snapshot != id {
		return nil, fmt.Errorf("memory store: %s: unreadable description %s", id, f.metaPath(id))
	}
	e.Path = f.memPath(id)
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

func (f *fileTier) remove(id string) error {
	var errs []error
	for _, p := range []string{f.metaPath(id), f.memPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *fileTier) info(in *Info) error {
	var st unix.Statfs_t
	if err := unix.Statfs(f.dir, &st); err != nil {
		return err
	}
	in.CapacityBytes, in.FreeBytes = int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	return f.entries(in)
}

// entries adds every readable entry and the bytes they take.
func (f *fileTier) entries(in *Info) error {
	ents, err := os.ReadDir(f.metaDir)
	if err != nil {
		return err
	}
	for _, d := range ents {
		id, ok := strings.CutSuffix(d.Name(), ".json")
		if !ok || !idRe.MatchString(id) {
			continue
		}
		if e, err := f.get(id); err == nil {
			in.Entries = append(in.Entries, *e)
			in.UsedBytes += e.Bytes
		}
	}
	return nil
}

func (f *fileTier) statfsFree() int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(f.dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}

// regions asks the file (SEEK_DATA).
func (f *fileTier) regions(e *Entry) ([]memlayout.PageRun, error) {
	fd, err := os.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	return Extents(fd, e.Size)
}

// verify hashes the copy once per process and whenever its stamp changes.
func (f *fileTier) verify(e *Entry) error {
	return snapshot.VerifyOnce(e.Path, func(full bool) error {
		if !full {
			return nil
		}
		fi, err := snapshot.HashFile(e.Path)
		if err != nil {
			return err
		}
		if fi.SHA256 != e.SHA256 {
			return fmt.Errorf("the store's copy of %s is damaged (sha256 %.12s, want %.12s)", e.Snapshot, fi.SHA256, e.SHA256)
		}
		return nil
	})
}

// mapping maps the one copy private into every clone.
func (f *fileTier) mapping(e *Entry, _ string) (*Mapping, error) {
	runs, err := f.regions(e)
	if err != nil {
		return nil, err
	}
	return fileMapping(e.Path, runs), nil
}

func (f *fileTier) owners() []string { return nil }
func (f *fileTier) close() error     { return nil }

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
