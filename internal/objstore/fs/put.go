package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/atomicfile"
	"github.com/thaw-dev/thaw/internal/objstore"
)

// mkdirAttempts bounds how often a put creates its directory again when
// a delete pruned it between the creation and the write.
const mkdirAttempts = 5

// Put writes data under key atomically (see the package doc for the
// conditional forms).
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := objstore.CheckPut(opts); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d, name, tmp, err := s.writeTemp(key, data)
	if err != nil {
		return err
	}
	defer d.Close()
	// After a rename nothing is left to remove; after a link, the
	// temporary name of the object.
	defer unix.Unlinkat(int(d.Fd()), tmp, 0)
	switch {
	case opts.IfAbsent:
		err = s.linkNew(key, d, tmp, name)
	case opts.IfMatch != "":
		err = s.replaceIf(ctx, key, d, tmp, name, opts.IfMatch)
	default:
		err = s.fsErr("put "+key, unix.Renameat(int(d.Fd()), tmp, int(d.Fd()), name))
	}
	if err != nil {
		return err
	}
	return s.fsErr("put "+key, d.Sync())
}

// writeTemp writes data to a new temporary file in key's directory
// (created as needed) and syncs it. It returns the directory, open, the
// object's name in it and the temporary file's.
func (s *Store) writeTemp(key string, data []byte) (*os.File, string, string, error) {
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	tmp := ".tmp-" + hex.EncodeToString(tok)
	var d *os.File
	var name string
	var fd int
	var err error
	for range mkdirAttempts {
		if d, name, err = s.openParent(key, true); err != nil {
			break
		}
		fd, err = unix.Openat(int(d.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, FileMode)
		if err == nil || !errors.Is(err, unix.ENOENT) {
			break
		}
		d.Close() // pruned by a delete since it was opened: again
	}
	if err != nil {
		if d != nil {
			d.Close()
		}
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EEXIST) {
			return nil, "", "", fmt.Errorf("put %s: a segment of the key is an object: %w", key, err)
		}
		return nil, "", "", s.fsErr("put "+key, err)
	}
	if err := atomicfile.WriteClose(os.NewFile(uintptr(fd), tmp), data); err != nil {
		unix.Unlinkat(int(d.Fd()), tmp, 0)
		d.Close()
		return nil, "", "", s.fsErr("put "+key, err)
	}
	return d, name, tmp, nil
}

// linkNew gives the written temporary file the key's name unless the key
// exists.
func (s *Store) linkNew(key string, d *os.File, tmp, name string) error {
	err := unix.Linkat(int(d.Fd()), tmp, int(d.Fd()), name, 0)
	if errors.Is(err, unix.EEXIST) {
		// Over NFS a retransmitted link that succeeded the first time
		// answers EEXIST: the file then has two names.
		var st unix.Stat_t
		if unix.Fstatat(int(d.Fd()), tmp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Nlink == 2 {
			return nil
		}
		return fmt.Errorf("%w: %s exists", objstore.ErrPrecondition, key)
	}
	return s.fsErr("put "+key, err)
}

// replaceIf renames the temporary file over the key if the key's ETag is
// still want, holding the key's lock.
func (s *Store) replaceIf(ctx context.Context, key string, d *os.File, tmp, name, want string) error {
	unlock, err := s.lock(ctx, key, d, name)
	if err != nil {
		return err
	}
	defer unlock()
	f, st, err := openObject(d, name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s is gone", objstore.ErrPrecondition, key)
	case err != nil:
		return s.fsErr("put "+key, err)
	}
	f.Close()
	if etag(st) != want {
		return fmt.Errorf("%w: %s changed", objstore.ErrPrecondition, key)
	}
	return s.fsErr("put "+key, unix.Renameat(int(d.Fd()), tmp, int(d.Fd()), name))
}

// lock takes the key's lock file in d, waiting while another holder has
// it and breaking one older than LockStale.
func (s *Store) lock(ctx context.Context, key string, d *os.File, name string) (func(), error) {
	lk := ".lock-" + name
	for {
		fd, err := unix.Openat(int(d.Fd()), lk, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, FileMode)
		if err == nil {
			unix.Close(fd)
			return func() { unix.Unlinkat(int(d.Fd()), lk, 0) }, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, s.fsErr("lock "+key, err)
		}
		var st unix.Stat_t
		if unix.Fstatat(int(d.Fd()), lk, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
			time.Since(time.Unix(st.Mtim.Unix())) > LockStale {
			unix.Unlinkat(int(d.Fd()), lk, 0)
			continue
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("put %s: waiting for its lock: %w", key, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// Delete removes the objects' files and then their directories left
// empty (up to the root).
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	dirs := map[string]bool{}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, name, err := s.openParent(k, false)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return s.fsErr("delete "+k, err)
		}
		err = unix.Unlinkat(int(d.Fd()), name, 0)
		d.Close()
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return s.fsErr("delete "+k, err)
		}
		if i := strings.LastIndex(k, "/"); i > 0 {
			dirs[k[:i]] = true
		}
	}
	for dir := range dirs {
		s.prune(dir)
	}
	return nil
}

// prune removes the directory dir (a key prefix) and its parents while
// they are empty.
func (s *Store) prune(dir string) {
	for dir != "" {
		d, name, err := s.openParent(dir, false)
		if err != nil {
			return
		}
		err = unix.Unlinkat(int(d.Fd()), name, unix.AT_REMOVEDIR)
		d.Close()
		if err != nil {
			return // not empty (or gone): its parents are not either
		}
		i := strings.LastIndex(dir, "/")
		if i < 0 {
			return
		}
		dir = dir[:i]
	}
}
