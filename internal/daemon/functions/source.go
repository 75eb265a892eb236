package functions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"golang.org/x/sys/unix"
)

// Bounds on a function's code, from a directory or an archive.
const (
	// MaxCodeEntries bounds files plus directories: each is an inode on the
	// host while unpacking and on the function disk.
	MaxCodeEntries = 10000
	// MaxCodePath bounds a path inside the function, in bytes.
	MaxCodePath = 1024
	// MaxCodeDepth bounds directory nesting.
	MaxCodeDepth = 32
)

// copyHook, if set (tests), runs after a directory is listed and before
// each entry in it is opened.
var copyHook func(rel string)

// trustedForDirectories says whether the caller may have the daemon read a
// directory on its host: only callers the kernel vouches for (the Unix
// socket) as root or members of the trusted group, or in-process callers.
func (m *Manager) trustedForDirectories(ctx context.Context) error {
	c, ok := m.d.CallerFrom(ctx)
	if !ok || c.Unix && c.UID == 0 {
		return nil
	}
	how := "upload the function as an archive instead (thaw function create without --server-dir)"
	if !c.Unix {
		return fmt.Errorf("%w: creating a function from a directory on the daemon's host needs the Unix socket (callers over TCP are known only by the token); %s", errdefs.ErrForbidden, how)
	}
	if m.cfg.TrustedGroup != "" {
		if g, err := user.LookupGroup(m.cfg.TrustedGroup); err == nil && inGroup(c, g.Gid) {
			return nil
		}
	}
	return fmt.Errorf("%w: uid %d may not create functions from directories on the daemon's host (root and the group %q may); %s",
		errdefs.ErrForbidden, c.UID, m.cfg.TrustedGroup, how)
}

func inGroup(c Caller, gid string) bool {
	if strconv.FormatUint(uint64(c.GID), 10) == gid {
		return true
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(c.UID), 10))
	if err != nil {
		return false
	}
	ids, err := u.GroupIds()
	return err == nil && slices.Contains(ids, gid)
}

// sourceRoot finds the configured function root dir lies under.
func (m *Manager) sourceRoot(dir string) (root, rel string, err error) {
	if len(m.cfg.FunctionRoots) == 0 {
		return "", "", fmt.Errorf("%w: creating functions from directories on the daemon's host is off: the operator has configured no --function-roots", errdefs.ErrForbidden)
	}
	if !filepath.IsAbs(dir) {
		return "", "", fmt.Errorf("%w: function directory %q is not an absolute path", errdefs.ErrInvalid, dir)
	}
	clean := filepath.Clean(dir)
	for _, r := range m.cfg.FunctionRoots {
		r = filepath.Clean(r)
		if clean == r {
			return r, ".", nil
		}
		if strings.HasPrefix(clean, r+"/") {
			return r, strings.TrimPrefix(clean, r+"/"), nil
		}
	}
	return "", "", fmt.Errorf("%w: %s is not under a function root (%s)", errdefs.ErrForbidden, dir, strings.Join(m.cfg.FunctionRoots, ", "))
}

// copySource copies the function directory src into dst for a trusted
// caller. Every directory and file is opened relative to its parent's
// descriptor without following symbolic links and without leaving the
// function root (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a link, or a
// file swapped for one while the copy runs, is refused, never followed.
func (m *Manager) copySource(ctx context.Context, dst, src string) error {
	if err := m.trustedForDirectories(ctx); err != nil {
		return err
	}
	root, rel, err := m.sourceRoot(src)
	if err != nil {
		return err
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: function root %s: %v", errdefs.ErrInvalid, root, err)
	}
	defer unix.Close(rootFD)
	dir, err := openBeneath(rootFD, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("%w: function directory %s: %v", errdefs.ErrInvalid, src, refusal(err))
	}
	c := &treeCopy{}
	if caller, ok := m.d.CallerFrom(ctx); ok && caller.UID != 0 {
		c.as = &readerOf{uid: caller.UID, groups: groupsOf(caller)}
	}
	if err := c.check(dir, "the function directory"); err != nil {
		dir.Close()
		return err
	}
	return c.dir(dir, dst, "", 0)
}

// readerOf is a caller the daemon reads files for: the daemon (root) reads
// only what the caller could read itself, so a trusted group member cannot
// use it to read another user's files under a function root.
type readerOf struct {
	uid    uint32
	groups []uint32
}

func groupsOf(c Caller) []uint32 {
	out := []uint32{c.GID}
	if u, err := user.LookupId(strconv.FormatUint(uint64(c.UID), 10)); err == nil {
		ids, _ := u.GroupIds()
		for _, id := range ids {
			if n, err := strconv.ParseUint(id, 10, 32); err == nil {
				out = append(out, uint32(n))
			}
		}
	}
	return out
}

// may reports whether the reader's permission class on st grants want
// (4 read, 1 search), as the kernel would decide it.
func (r *readerOf) may(st *unix.Stat_t, want uint32) bool {
	mode := st.Mode
	switch {
	case st.Uid == r.uid:
		mode >>= 6
	case slices.Contains(r.groups, st.Gid):
		mode >>= 3
	}
	return mode&want == want
}

// check refuses f if the caller could not read it (directories: list and
// enter it) itself.
func (c *treeCopy) check(f *os.File, rel string) error {
	if c.as == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	want := uint32(4)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		want = 5
	}
	if !c.as.may(&st, want) {
		return fmt.Errorf("%w: %s is not readable by uid %d, who asked for it", errdefs.ErrForbidden, rel, c.as.uid)
	}
	return nil
}

func openBeneath(dirFD int, name string, flags uint64) (*os.File, error) {
	fd, err := unix.Openat2(dirFD, name, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// refusal words an openat2 error.
func refusal(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return errors.New("is a symbolic link (refused)")
	case errors.Is(err, unix.EXDEV):
		return errors.New("leaves the function root (refused)")
	case errors.Is(err, unix.ENOENT):
		return errors.New("does not exist")
	}
	return err
}

// treeCopy counts what a copy has taken so far.
type treeCopy struct {
	entries int
	bytes   int64
	as      *readerOf // nil: the caller may read anything (root, in-process)
}

// dir copies the open directory d (at rel inside the function) into dst.
func (c *treeCopy) dir(d *os.File, dst, rel string, depth int) error {
	defer d.Close()
	if depth > MaxCodeDepth {
		return fmt.Errorf("%w: %s is nested deeper than %d directories", errdefs.ErrInvalid, rel, MaxCodeDepth)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", errdefs.ErrInvalid, rel, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if skipName(name) {
			continue
		}
		p := filepath.Join(rel, name)
		if c.entries++; c.entries > MaxCodeEntries {
			return fmt.Errorf("%w: function has more than %d files and directories", errdefs.ErrInvalid, MaxCodeEntries)
		}
		if len(p) > MaxCodePath {
			return fmt.Errorf("%w: path %.80q... is longer than %d bytes", errdefs.ErrInvalid, p, MaxCodePath)
		}
		if copyHook != nil {
			copyHook(p)
		}
		f, err := openBeneath(int(d.Fd()), name, unix.O_RDONLY)
		if err != nil {
			return fmt.Errorf("%w: %s %v", errdefs.ErrInvalid, p, refusal(err))
		}
		if err := c.check(f, p); err != nil {
			f.Close()
			return err
		}
		if err := c.entry(f, filepath.Join(dst, name), p, depth); err != nil {
			return err
		}
	}
	return nil
}

// entry copies the opened f, judged by what it is (fstat), not by its name.
func (c *treeCopy) entry(f *os.File, dst, rel string, depth int) error {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	switch {
	case st.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			f.Close()
			return err
		}
		return c.dir(f, dst, rel, depth+1)
	case st.Mode().IsRegular():
		defer f.Close()
		if c.bytes += st.Size(); c.bytes > MaxCodeBytes {
			return fmt.Errorf("%w: function code exceeds %d MiB", errdefs.ErrInvalid, MaxCodeBytes>>20)
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm()|0o444)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, f); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	default:
		f.Close()
		return fmt.Errorf("%w: %s is not a regular file or directory", errdefs.ErrInvalid, rel)
	}
}
