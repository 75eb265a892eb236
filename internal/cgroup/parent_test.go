package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Close removes the parent and the empty groups below it in every
// hierarchy; a group holding a process stays, and so does its parent,
// until the process is gone.
func TestCloseRemovesParent(t *testing.T) {
	m := present(t)
	busy, err := m.New("vm-busy", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.New("vm-idle", Limits{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := busy.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	parents := m.Parents()
	if m.Version() == V1 && len(parents) != len(v1Controllers) || m.Version() == V2 && len(parents) != 1 {
		t.Fatalf("parents %v", parents)
	}
	if err := m.Close(); err == nil {
		t.Fatal("closed a parent whose group holds a process")
	}
	for _, p := range parents {
		if exists(filepath.Join(p, "vm-idle")) || !exists(filepath.Join(p, "vm-busy")) {
			t.Fatalf("%s: the idle group stayed or the busy one went", p)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range parents {
		if exists(p) {
			t.Errorf("%s stayed", p)
		}
	}
}

// RemoveParent takes what a dead daemon left at a recorded path, and
// refuses paths that are not a thaw parent on a cgroup file system.
func TestRemoveParent(t *testing.T) {
	m := present(t)
	if _, err := m.New("vm-left", Limits{}); err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(m.Parent())
	for _, p := range m.Parents() {
		if err := RemoveParent(p, name); err != nil {
			t.Fatal(err)
		}
		if exists(p) {
			t.Errorf("%s stayed", p)
		}
		if err := RemoveParent(p, name); err != nil {
			t.Errorf("a parent already gone: %v", err)
		}
	}
	tmp := filepath.Join(t.TempDir(), name)
	os.Mkdir(tmp, 0o755)
	for _, p := range []string{tmp, "relative/" + name, m.Parent() + "/../other", filepath.Dir(m.Parent())} {
		if err := RemoveParent(p, name); !errors.Is(err, ErrNotCgroup) {
			t.Errorf("%s: %v, want %v", p, err, ErrNotCgroup)
		}
	}
	if !exists(tmp) {
		t.Error("a directory outside cgroups was removed")
	}
}
