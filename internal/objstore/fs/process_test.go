package fs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/thaw-dev/thaw/internal/objstore"
	fsstore "github.com/thaw-dev/thaw/internal/objstore/fs"
)

// Conditional puts between processes: several processes (this test's
// binary again) increment one counter with put-if-unchanged and create one
// key with put-if-absent; no increment is lost, one creation wins.
func TestConditionalAcrossProcesses(t *testing.T) {
	if dir := os.Getenv("THAW_FS_CHILD_DIR"); dir != "" {
		child(t, dir)
		return
	}
	const procs, each = 3, 20
	root := filepath.Join(t.TempDir(), "r")
	s := open(t, root)
	ctx := context.Background()
	if err := s.Put(ctx, "counter", []byte("0"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestConditionalAcrossProcesses$", "-test.count=1")
		cmds[i].Env = append(os.Environ(), "THAW_FS_CHILD_DIR="+root, "THAW_FS_CHILD_N="+strconv.Itoa(each), "THAW_FS_CHILD_ID="+strconv.Itoa(i))
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	b, _, err := s.Get(ctx, "counter", objstore.GetOptions{})
	if err != nil || string(b) != strconv.Itoa(procs*each) {
		t.Fatalf("counter %q (%v) after %d increments", b, err, procs*each)
	}
	won := 0
	for i := range procs {
		if _, err := s.Stat(ctx, fmt.Sprintf("won/%d", i)); err == nil {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d processes created the key, want 1", won)
	}
}

// child does its share of TestConditionalAcrossProcesses.
func child(t *testing.T, root string) {
	s, err := fsstore.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := os.Getenv("THAW_FS_CHILD_ID")
	switch err := s.Put(ctx, "once", []byte(id), objstore.PutOptions{IfAbsent: true}); {
	case err == nil:
		if err := s.Put(ctx, "won/"+id, nil, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	case !errors.Is(err, objstore.ErrPrecondition):
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(os.Getenv("THAW_FS_CHILD_N"))
	for done := 0; done < n; {
		b, info, err := s.Get(ctx, "counter", objstore.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Put(ctx, "counter", []byte(strconv.Itoa(v+1)), objstore.PutOptions{IfMatch: info.ETag})
		switch {
		case err == nil:
			done++
		case !errors.Is(err, objstore.ErrPrecondition):
			t.Fatal(err)
		}
	}
}
