package vms

import (
	"fmt"
	"os"

	"github.com/thaw-dev/thaw/internal/cgroup"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// vmTasks bounds a VMM's threads (vCPUs, I/O workers, RCU, ...).
const vmTasks = 512

// confinement is what the manager holds to confine its VMMs.
type confinement struct {
	cgroups *cgroup.Manager // nil when the daemon cannot manage cgroups
	// uffdDevice: /dev/userfaultfd exists, so an unprivileged VMM can
	// create a userfaultfd from a descriptor the daemon opened.
	uffdDevice bool
	root       bool // the daemon runs as root and can switch users
	uidsInUse  map[uint32]string
}

// openConfinement prepares per-VM users and cgroups. A daemon not running
// as root runs its VMMs as itself, without cgroups, and says so.
func (m *Manager) openConfinement() error {
	c := &m.confine
	c.root = os.Geteuid() == 0
	if _, err := os.Stat("/dev/userfaultfd"); err == nil {
		c.uffdDevice = true
	}
	if !c.root {
		m.d.Log.Warn("thawd is not running as root: VMMs run as the daemon's user, without cgroups, in the daemon's network namespace")
		return nil
	}
	if m.cfg.CgroupRoot == "" {
		m.d.Log.Warn("cgroups disabled by configuration: VMs have no memory or CPU limits")
		return nil
	}
	g, err := cgroup.Open(m.cfg.CgroupRoot, CgroupParentName(m.cfg.DataDir))
	if err != nil {
		return fmt.Errorf("cgroups for VMs: %w", err)
	}
	c.cgroups = g
	m.d.Log.Info("vm cgroups", "version", g.Version(), "parent", g.Parent())
	if !c.uffdDevice {
		m.d.Log.Warn("no /dev/userfaultfd (Linux before 6.1): reap restores and prepare's REAP record run QEMU as root")
	}
	return nil
}

// needsRoot says whether a VMM with this memory must run as root: a
// userfaultfd needs /dev/userfaultfd, or privileges, when
// vm.unprivileged_userfaultfd is 0.
func (c *confinement) needsRoot(mem vmm.Memory) bool {
	return !c.uffdDevice && mem.Backing.Kind == vmm.BackedByUffd
}

// confineSpec gives a VM its own user, cgroup and empty network namespace.
// release undoes it after the VMM has exited.
func (m *Manager) confineSpec(spec *vmm.Spec) (release func(), err error) {
	c := &m.confine
	spec.ConsoleLimit = m.cfg.ConsoleLogLimit
	var undo []func()
	release = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	// QEMU gets a network namespace of its own with nothing in it: its
	// tap comes as a descriptor, so it needs none, and a guest that takes
	// QEMU over cannot reach the host's loopback services or the API.
	spec.EmptyNetNS = c.root
	if c.root && !c.needsRoot(spec.Memory) {
		uid, err := m.allocUID(spec.ID)
		if err != nil {
			return release, err
		}
		spec.User = &vmm.User{UID: uid, GID: uid}
		undo = append(undo, func() { m.freeUID(uid) })
	}
	if c.cgroups != nil {
		limit := int64(spec.MemoryMiB+m.cfg.MemoryOverheadMiB) << 20
		g, err := c.cgroups.New(spec.ID, cgroup.Limits{MemoryBytes: limit, CPUWeight: m.cfg.CPUWeight, Tasks: vmTasks})
		if err != nil {
			return release, err
		}
		spec.Cgroup = g
		undo = append(undo, func() {
			if err := g.Remove(); err != nil {
				m.d.Log.Warn("remove vm cgroup", "vm", spec.ID, "err", err)
			}
		})
	}
	return release, nil
}

func (m *Manager) allocUID(vm string) (uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := &m.confine
	for i := uint32(0); i < m.cfg.UIDCount; i++ {
		uid := m.cfg.UIDBase + i
		if _, used := c.uidsInUse[uid]; !used {
			c.uidsInUse[uid] = vm
			return uid, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d VMM user ids are in use", errdefs.ErrConflict, m.cfg.UIDCount)
}

func (m *Manager) freeUID(uid uint32) {
	m.mu.Lock()
	delete(m.confine.uidsInUse, uid)
	m.mu.Unlock()
}

// CgroupParents are the cgroup parent directories of the VMs, none
// without cgroups.
func (m *Manager) CgroupParents() []string {
	if m.confine.cgroups == nil {
		return nil
	}
	return m.confine.cgroups.Parents()
}
