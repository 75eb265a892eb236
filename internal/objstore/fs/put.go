package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// mkdirAttempts bounds how often a put creates its directory again when
// a delete pruned it between the creation and the write.
const mkdirAttempts = 5

// Put writes data under key atomically (see the package doc for the
// conditional forms).
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := objstore.CheckPut(opts); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := s.writeTemp(key, p, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after a rename or a link: nothing, or the link's other name
	switch {
	case opts.IfAbsent:
		err = s.linkNew(key, tmp, p)
	case opts.IfMatch != "":
		err = s.replaceIf(ctx, key, tmp, p, opts.IfMatch)
	default:
		err = s.fsErr("put "+key, os.Rename(tmp, p))
	}
	if err != nil {
		return err
	}
	return s.fsErr("put "+key, syncDir(filepath.Dir(p)))
}

// writeTemp writes data to a new temporary file beside p and syncs it.
func (s *Store) writeTemp(key, p string, data []byte) (string, error) {
	dir := filepath.Dir(p)
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	tmp := filepath.Join(dir, ".tmp-"+hex.EncodeToString(tok))
	var f *os.File
	var err error
	for range mkdirAttempts {
		if err = os.MkdirAll(dir, DirMode); err != nil {
			break
		}
		if f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, FileMode); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EEXIST) {
			return "", fmt.Errorf("put %s: a segment of the key is an object: %w", key, err)
		}
		return "", s.fsErr("put "+key, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", s.fsErr("put "+key, err)
	}
	return tmp, nil
}

// linkNew gives the written temporary file the key's name unless the key
// exists.
func (s *Store) linkNew(key, tmp, p string) error {
	err := os.Link(tmp, p)
	if errors.Is(err, os.ErrExist) {
		// Over NFS a retransmitted link that succeeded the first time
		// answers EEXIST: the file then has two names.
		if st, serr := os.Stat(tmp); serr == nil && linkCount(st) == 2 {
			return nil
		}
		return fmt.Errorf("%w: %s exists", objstore.ErrPrecondition, key)
	}
	return s.fsErr("put "+key, err)
}

func linkCount(st os.FileInfo) uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Nlink)
	}
	return 0
}

// replaceIf renames the temporary file over the key if the key's ETag is
// still want, holding the key's lock.
func (s *Store) replaceIf(ctx context.Context, key, tmp, p, want string) error {
	unlock, err := s.lock(ctx, key, p)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s is gone", objstore.ErrPrecondition, key)
	case err != nil:
		return s.fsErr("put "+key, err)
	case etag(st) != want:
		return fmt.Errorf("%w: %s changed", objstore.ErrPrecondition, key)
	}
	return s.fsErr("put "+key, os.Rename(tmp, p))
}

// lock takes the key's lock file, waiting while another holder has it and
// breaking one older than LockStale.
func (s *Store) lock(ctx context.Context, key, p string) (func(), error) {
	lp := filepath.Join(filepath.Dir(p), ".lock-"+filepath.Base(p))
	for {
		f, err := os.OpenFile(lp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, FileMode)
		if err == nil {
			f.Close()
			return func() { os.Remove(lp) }, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, s.fsErr("lock "+key, err)
		}
		if st, err := os.Stat(lp); err == nil && time.Since(st.ModTime()) > LockStale {
			os.Remove(lp)
			continue
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("put %s: waiting for its lock: %w", key, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Delete removes the objects' files and then their directories left
// empty (up to the root).
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	paths := make([]string, len(keys))
	for i, k := range keys {
		p, err := s.path(k)
		if err != nil {
			return err
		}
		paths[i] = p
	}
	dirs := map[string]bool{}
	for i, p := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return s.fsErr("delete "+keys[i], err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		// Fails (and stops) at the first directory that is not empty.
		for d != s.root && strings.HasPrefix(d, s.root+string(filepath.Separator)) && os.Remove(d) == nil {
			d = filepath.Dir(d)
		}
	}
	return nil
}

// List yields the objects under prefix in key order. It walks the
// deepest directory the prefix names and sorts what it finds.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[objstore.Info, error] {
	return func(yield func(objstore.Info, error) bool) {
		var found []objstore.Info
		dir := s.root
		if i := strings.LastIndex(prefix, "/"); i >= 0 {
			dir = filepath.Join(s.root, filepath.FromSlash(prefix[:i]))
			if !strings.HasPrefix(dir, s.root+string(filepath.Separator)) {
				yield(objstore.Info{}, fmt.Errorf("%w: list prefix %q leaves the store", objstore.ErrInvalidKey, prefix))
				return
			}
		}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil // gone while walking, or no such prefix
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), ".") && p != dir {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, _ := filepath.Rel(s.root, p)
			key := filepath.ToSlash(rel)
			if !strings.HasPrefix(key, prefix) {
				return nil
			}
			st, err := d.Info()
			if errors.Is(err, os.ErrNotExist) {
				return nil // deleted since it was read
			}
			if err != nil {
				return err
			}
			found = append(found, info(key, st))
			return nil
		})
		if err != nil {
			yield(objstore.Info{}, s.fsErr("list "+prefix, err))
			return
		}
		sort.Slice(found, func(i, j int) bool { return found[i].Key < found[j].Key })
		for _, o := range found {
			if !yield(o, nil) {
				return
			}
		}
	}
}
