package fs

import (
	"context"
	"errors"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// List yields the objects under prefix in key order. It walks the
// directories that can hold such keys (links are not followed) and sorts
// what it finds: byte order is not a directory walk's ("a-b" sorts
// before "a/b").
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[objstore.Info, error] {
	return func(yield func(objstore.Info, error) bool) {
		found, err := s.walk(ctx, prefix)
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

func (s *Store) walk(ctx context.Context, prefix string) ([]objstore.Info, error) {
	root, err := filepath.EvalSymlinks(s.root) // the root may be a link; nothing under it is followed
	if err != nil {
		return nil, err
	}
	var found []objstore.Info
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // deleted while the walk ran
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		key := filepath.ToSlash(rel)
		switch {
		case strings.HasPrefix(d.Name(), "."): // the store's own
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case d.IsDir():
			// Walk only directories whose keys can start with prefix.
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		case !d.Type().IsRegular() || !strings.HasPrefix(key, prefix):
			return nil
		}
		st, err := d.Info()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		found = append(found, info(key, st))
		return nil
	})
	return found, err
}
