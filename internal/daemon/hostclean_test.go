package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/daemon/vms"
)

// ownCgroupDir is this process's cgroup directory in the v1 hierarchy of
// controller (v2: the unified one), or "" on a host that has neither.
func ownCgroupDir(t *testing.T, controller string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return filepath.Join("/sys/fs/cgroup", controller, parts[2])
			}
		}
		if parts[1] == "" {
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				return filepath.Join("/sys/fs/cgroup", parts[2])
			}
		}
	}
	return ""
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// A daemon records where its cgroup parent is and, at exit, removes it,
// the record and its empty store directory.
func TestCloseUndoesHostChanges(t *testing.T) {
	s, _ := fakeService(t, nil)
	parents := s.vms.CgroupParents()
	if parents == nil {
		t.Skip("no cgroups on this host")
	}
	rec, err := os.ReadFile(filepath.Join(s.cfg.DataDir, vms.CgroupRecord))
	if err != nil || string(rec) != strings.Join(parents, "\n")+"\n" {
		t.Fatalf("record %q %v, parents %v", rec, err, parents)
	}
	createFn(t, s, "echo")
	if _, err := s.BootVM(context.Background(), "echo"); err != nil {
		t.Fatal(err)
	}
	store := s.snaps.Store().Dir()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(parents, filepath.Join(s.cfg.DataDir, vms.CgroupRecord), store) {
		if exists(p) {
			t.Errorf("%s outlived the daemon", p)
		}
	}
}

// What a daemon that died left in another cgroup (it ran elsewhere) is
// removed at the next start on its data directory; a recorded path that is
// not a thaw cgroup parent is left alone.
func TestStartRemovesCgroupsLeftElsewhere(t *testing.T) {
	var elsewhere, parent, bogus string
	s, _ := fakeService(t, func(c *Config) {
		own := ownCgroupDir(t, "pids")
		if own == "" {
			t.Skip("no pids cgroup hierarchy")
		}
		elsewhere = filepath.Join(own, "thaw-test-elsewhere-"+filepath.Base(c.DataDir))
		parent = filepath.Join(elsewhere, vms.CgroupParentName(c.DataDir))
		if err := os.MkdirAll(filepath.Join(parent, "vm-0123456789ab"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(filepath.Join(parent, "vm-0123456789ab"))
			os.Remove(parent)
			os.Remove(elsewhere)
		})
		bogus = filepath.Join(t.TempDir(), vms.CgroupParentName(c.DataDir))
		if err := os.Mkdir(bogus, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.DataDir, vms.CgroupRecord), []byte(parent+"\n"+bogus+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if s.vms.CgroupParents() == nil {
		t.Skip("no cgroups on this host")
	}
	if exists(parent) {
		t.Errorf("the cgroup a dead daemon left elsewhere is still there: %s", parent)
	}
	if !exists(bogus) {
		t.Errorf("a recorded directory outside cgroups was removed: %s", bogus)
	}
	rec, _ := os.ReadFile(filepath.Join(s.cfg.DataDir, vms.CgroupRecord))
	if strings.Contains(string(rec), parent) || strings.Contains(string(rec), bogus) {
		t.Errorf("record after start: %q", rec)
	}
}
