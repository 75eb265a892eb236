// Package fs is the objstore.Store of a directory: each object is a file
// under the root, at the path its key names. The root may be local (one
// host, tests) or shared by the nodes over NFS.
//
// A put writes a temporary file in the object's directory, syncs it and
// renames it over the key (and syncs the directory): readers see the old
// file or the new one, never a part. A put IfAbsent links the synced
// temporary file to the key instead, which fails when the key exists
// (link is atomic on local filesystems and on NFS, unlike an O_EXCL create
// that would show the object before its bytes). A put IfMatch holds the
// key's lock file (created with O_EXCL) while it compares the ETag and
// renames. The ETag is the file's inode, size and change time: every put
// makes a new file.
//
// Limits: conditional puts are ordered among themselves; an unconditional
// put or a delete of the same key racing a conditional put is not (the
// registry never mixes them on one key). A lock file older than LockStale
// is taken to be a dead holder's and broken, so a holder stalled longer
// than that can lose its exclusion. Names starting with "." are the
// store's own (temporaries, locks): keys with such a segment are refused,
// and listings skip them. A key that is another key's directory (both
// "a" and "a/b") cannot be stored.
package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// File modes of what the store creates: the registry holds snapshot
// memory, readable by the nodes' daemons only.
const (
	FileMode = 0o600
	DirMode  = 0o700
)

// LockStale is the age past which a conditional put's lock file is taken
// to be left by a dead holder and removed.
var LockStale = 30 * time.Second

// lockPoll is how often a conditional put waiting for a lock tries again.
const lockPoll = 5 * time.Millisecond

// Store is a directory of objects.
type Store struct {
	root string
}

var _ objstore.Store = (*Store)(nil)

// Open is the store rooted at root, an absolute path. It does not touch
// the directory (Ping checks it, Init creates it).
func Open(root string) (*Store, error) {
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return nil, fmt.Errorf("object directory %q: give an absolute, clean path", root)
	}
	return &Store{root: root}, nil
}

// String is the root directory.
func (s *Store) String() string { return s.root }

// checkKey refuses keys that would leave the root or collide with the
// store's own files.
func checkKey(key string) error {
	if err := objstore.CheckKey(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if strings.HasPrefix(seg, ".") {
			return fmt.Errorf("%w: %q: segments starting with \".\" are the store's own", objstore.ErrInvalidKey, key)
		}
	}
	return nil
}

// fsErr maps a filesystem error: a missing file is ErrNotFound, an I/O
// error or a stale or unreachable network filesystem ErrUnavailable; the
// cause (ENOSPC, EDQUOT, EACCES, ...) stays wrapped.
func (s *Store) fsErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNoRoot):
		return fmt.Errorf("%w: %s: directory %s does not exist (create it, or mount the shared filesystem there)", objstore.ErrNotFound, what, s.root)
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %s", objstore.ErrNotFound, what)
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, syscall.ENOTCONN), errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.EHOSTUNREACH):
		return fmt.Errorf("%w: %s in %s: %w", objstore.ErrUnavailable, what, s.root, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%s: no space left in %s: %w", what, s.root, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Ping checks that the root is a directory.
func (s *Store) Ping(ctx context.Context) error {
	st, err := os.Stat(s.root)
	if err != nil {
		return s.fsErr("directory "+s.root, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", objstore.ErrNotFound, s.root)
	}
	return nil
}

// Init creates the root directory.
func (s *Store) Init(ctx context.Context) error {
	return s.fsErr("directory "+s.root, os.MkdirAll(s.root, DirMode))
}

// ETag of a file: its inode, size and change time.
func etag(st os.FileInfo) string {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%x-%x-%x.%x", sys.Ino, sys.Size, sys.Ctim.Sec, sys.Ctim.Nsec)
	}
	return fmt.Sprintf("%x-%x", st.Size(), st.ModTime().UnixNano())
}

func info(key string, st os.FileInfo) objstore.Info {
	return objstore.Info{Key: key, Size: st.Size(), ModTime: st.ModTime(), ETag: etag(st)}
}

// open opens key's file for reading.
func (s *Store) open(key string) (*os.File, os.FileInfo, error) {
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	d, name, err := s.openParent(key, false)
	if err != nil {
		return nil, nil, s.fsErr(key, err)
	}
	defer d.Close()
	f, st, err := openObject(d, name)
	if err != nil {
		return nil, nil, s.fsErr(key, err)
	}
	return f, st, nil
}

// Stat returns the object's Info.
func (s *Store) Stat(ctx context.Context, key string) (objstore.Info, error) {
	f, st, err := s.open(key)
	if err != nil {
		return objstore.Info{}, err
	}
	f.Close()
	return info(key, st), nil
}

// Get reads the object or a range of it.
func (s *Store) Get(ctx context.Context, key string, opts objstore.GetOptions) ([]byte, objstore.Info, error) {
	if err := objstore.CheckGet(opts); err != nil {
		return nil, objstore.Info{}, err
	}
	f, st, err := s.open(key)
	if err != nil {
		return nil, objstore.Info{}, err
	}
	defer f.Close()
	n := max(0, st.Size()-opts.Offset)
	if opts.Length > 0 {
		n = min(n, opts.Length)
	}
	if opts.Limit > 0 && n > opts.Limit {
		return nil, objstore.Info{}, fmt.Errorf("%w: %s is larger than %d bytes", objstore.ErrTooLarge, key, opts.Limit)
	}
	buf := slices.Grow(opts.Buf[:0], int(n))[:n]
	if _, err := f.ReadAt(buf, opts.Offset); err != nil && n > 0 {
		// The file is replaced by rename, never shortened in place: a
		// short read is a damaged store.
		return nil, objstore.Info{}, s.fsErr("read "+key, err)
	}
	return buf, info(key, st), nil
}
