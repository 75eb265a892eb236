package fs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// fsErr: what a network filesystem answers when its server is away is
// ErrUnavailable (the daemon's 503); a full disk keeps its ENOSPC (the
// daemon's no space); a missing file is ErrNotFound.
func TestFSErr(t *testing.T) {
	s := &Store{root: "/srv/registry"}
	for _, tc := range []struct {
		err  error
		want []error
	}{
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EIO}, []error{objstore.ErrUnavailable, syscall.EIO}},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ESTALE}, []error{objstore.ErrUnavailable}},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ETIMEDOUT}, []error{objstore.ErrUnavailable}},
		{&os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, []error{syscall.ENOSPC}},
		{&os.PathError{Op: "write", Path: "x", Err: syscall.EDQUOT}, []error{syscall.EDQUOT}},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, []error{objstore.ErrNotFound}},
		{errNoRoot, []error{objstore.ErrNotFound}},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, []error{syscall.EACCES}},
	} {
		got := s.fsErr("put k", tc.err)
		for _, w := range tc.want {
			if !errors.Is(got, w) {
				t.Errorf("fsErr(%v) = %v, not %v", tc.err, got, w)
			}
		}
		if errors.Is(got, objstore.ErrUnavailable) != errors.Is(tc.want[0], objstore.ErrUnavailable) {
			t.Errorf("fsErr(%v) = %v: unavailable when it should not be, or not when it should", tc.err, got)
		}
	}
	if got := fmt.Sprint(s.fsErr("put k", errNoRoot)); got != "object not found: put k: directory /srv/registry does not exist (create it, or mount the shared filesystem there)" {
		t.Errorf("missing root: %q", got)
	}
}
