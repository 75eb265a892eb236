package vms

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thaw-dev/thaw/internal/cgroup"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// What the VMs change on the host outside the data directory, and how it
// is undone (docs/operations.md):
//   - full egress's table and forwarding: vmnet.Host, shared with the
//     other daemons of the network namespace (package hoststate);
//   - the VMs' cgroup parent: removed at exit; its directories are
//     recorded in the data directory (CgroupRecord), so the next start
//     removes what a daemon that died left, wherever it was;
//   - each VM's network namespace, veth link and cgroup: with the VM; a
//     dead daemon's VMs are killed at the next start (Reconcile), their
//     links removed.

// CgroupRecord, in the data directory, lists the cgroup parent
// directories of the daemon using it, one per line.
const CgroupRecord = "cgroups"

// CgroupParentName is the cgroup parent of the daemon on dataDir.
func CgroupParentName(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return "thaw-" + hex.EncodeToString(sum[:4])
}

// OpenHost prepares the host for VMs: per-VM users and cgroups (the
// cgroup parents a daemon that died on this data directory left elsewhere
// removed, this one's recorded) and the VMs' network.
func (m *Manager) OpenHost() error {
	if err := m.openConfinement(); err != nil {
		return err
	}
	m.adoptCgroups()
	n, err := vmnet.NewHost(vmnet.HostConfig{AllowFullEgress: m.cfg.AllowFullEgress}, m.d.Log)
	if err != nil {
		return fmt.Errorf("vm network: %w", err)
	}
	m.net = n
	return nil
}

// adoptCgroups removes the cgroup parents a daemon that died on this data
// directory left where this one will not reuse them, then records this
// daemon's. cgroup.Open has emptied this daemon's own parent.
func (m *Manager) adoptCgroups() {
	path := filepath.Join(m.cfg.DataDir, CgroupRecord)
	current := m.CgroupParents()
	if b, err := os.ReadFile(path); err == nil {
		for _, p := range strings.Split(string(b), "\n") {
			if p = strings.TrimSpace(p); p == "" || slices.Contains(current, p) {
				continue
			}
			if err := cgroup.RemoveParent(p, CgroupParentName(m.cfg.DataDir)); err != nil {
				m.d.Log.Warn("cgroup an earlier daemon left", "dir", p, "err", err)
				continue
			}
			m.d.Log.Info("removed the cgroup an earlier daemon left", "dir", p)
		}
	}
	if err := writeRecord(path, current); err != nil {
		m.d.Log.Warn("record vm cgroups", "err", err)
	}
}

// ReleaseHost undoes the VMs' changes to the host once they are gone;
// what cannot be undone now (a group that still holds a process) stays
// recorded for the next start.
func (m *Manager) ReleaseHost() {
	if m.net != nil {
		if err := m.net.Close(); err != nil {
			m.d.Log.Warn("undo full egress", "err", err)
		}
		m.net = nil
	}
	if g := m.confine.cgroups; g != nil {
		if err := g.Close(); err != nil {
			m.d.Log.Warn("remove vm cgroups", "err", err)
		} else if err := os.Remove(filepath.Join(m.cfg.DataDir, CgroupRecord)); err != nil && !os.IsNotExist(err) {
			m.d.Log.Warn("vm cgroup record", "err", err)
		}
		m.confine.cgroups = nil
	}
}

// removeVMLink removes the full-egress link of a VM a dead daemon left.
func (m *Manager) removeVMLink(vm string) {
	if removed, err := vmnet.RemoveLink(vm); err != nil {
		m.d.Log.Warn("remove vm link", "vm", vm, "err", err)
	} else if removed {
		m.d.Log.Warn("removed the network link of a vm an earlier daemon left", "vm", vm)
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
