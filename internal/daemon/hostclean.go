package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thaw-dev/thaw/internal/cgroup"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// What a daemon changes on the host outside its data directory, and how
// it is undone (docs/operations.md):
//   - full egress's table and forwarding: vmnet.Host, shared with the
//     other daemons of the network namespace (package hoststate);
//   - its VMs' cgroup parent: removed at exit; its directories are
//     recorded in the data directory (cgroupRecord), so the next start
//     removes what a daemon that died left, wherever it was;
//   - its memory store's directory: removed at exit when it holds no copy;
//   - each VM's network namespace, veth link and cgroup: with the VM; a
//     dead daemon's VMs are killed at the next start (reconcile), their
//     links removed.

// cgroupRecord, in the data directory, lists the cgroup parent
// directories of the daemon using it, one per line.
const cgroupRecord = "cgroups"

// cgroupParentName is the cgroup parent of the daemon on dataDir.
func cgroupParentName(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return "thaw-" + hex.EncodeToString(sum[:4])
}

// adoptHostLeftovers removes what a daemon that died on this data
// directory left on the host where this one will not reuse it (cgroup
// parents elsewhere, a default memory store no longer configured), then
// records this daemon's cgroup parents. Start calls it once cgroups are
// open (cgroup.Open has emptied this daemon's own parent).
func (s *Service) adoptHostLeftovers() {
	path := filepath.Join(s.cfg.DataDir, cgroupRecord)
	var current []string
	if m := s.confine.cgroups; m != nil {
		current = m.Parents()
	}
	if b, err := os.ReadFile(path); err == nil {
		for _, p := range strings.Split(string(b), "\n") {
			if p = strings.TrimSpace(p); p == "" || slices.Contains(current, p) {
				continue
			}
			if err := cgroup.RemoveParent(p, cgroupParentName(s.cfg.DataDir)); err != nil {
				s.log.Warn("cgroup an earlier daemon left", "dir", p, "err", err)
				continue
			}
			s.log.Info("removed the cgroup an earlier daemon left", "dir", p)
		}
	}
	if err := writeRecord(path, current); err != nil {
		s.log.Warn("record vm cgroups", "err", err)
	}
	if s.cfg.StoreDeviceFile != "" || absPath(s.cfg.StoreDir) != store.DefaultDirFor(s.cfg.DataDir) {
		if err := store.RemoveUnusedDefault(s.cfg.DataDir); err != nil {
			s.log.Warn("memory store an earlier daemon left", "err", err)
		}
	}
}

// releaseHost undoes this daemon's changes to the host once its VMs are
// gone and its store is closed; what cannot be undone now (a group that
// still holds a process) stays recorded for the next start.
func (s *Service) releaseHost() {
	if s.net != nil {
		if err := s.net.Close(); err != nil {
			s.log.Warn("undo full egress", "err", err)
		}
		s.net = nil
	}
	if m := s.confine.cgroups; m != nil {
		if err := m.Close(); err != nil {
			s.log.Warn("remove vm cgroups", "err", err)
		} else if err := os.Remove(filepath.Join(s.cfg.DataDir, cgroupRecord)); err != nil && !os.IsNotExist(err) {
			s.log.Warn("vm cgroup record", "err", err)
		}
		s.confine.cgroups = nil
	}
	if st := s.snaps.Store(); st != nil {
		if gone, err := st.RemoveIfEmpty(); err != nil {
			s.log.Warn("remove memory store directory", "err", err)
		} else if !gone {
			s.log.Info("memory store kept for the next daemon", "dir", st.Dir())
		}
	}
}

// removeVMLink removes the full-egress link of a VM a dead daemon left.
func (s *Service) removeVMLink(vm string) {
	if removed, err := vmnet.RemoveLink(vm); err != nil {
		s.log.Warn("remove vm link", "vm", vm, "err", err)
	} else if removed {
		s.log.Warn("removed the network link of a vm an earlier daemon left", "vm", vm)
	}
}

// writeRecord writes lines to path atomically, or removes it if none.
func writeRecord(path string, lines []string) error {
	if len(lines) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
