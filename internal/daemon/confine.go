package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/thaw-dev/thaw/internal/cgroup"
	"github.com/thaw-dev/thaw/internal/daemon/config"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Confinement defaults.
const (
	// DefaultVMUIDBase starts the range of user ids VMMs run as, one per
	// live VM, so that VMs cannot signal, trace or read each other. The
	// range 1879048192-2147483647 is left unused by Linux distributions
	// and systemd (their container ranges lie below it).
	DefaultVMUIDBase  = config.DefaultVMUIDBase
	DefaultVMUIDCount = config.DefaultVMUIDCount
	// DefaultVMMemoryOverheadMiB is what a VM's cgroup may use beyond guest
	// RAM: QEMU itself, TCG's translation cache, page cache it faults in.
	DefaultVMMemoryOverheadMiB = config.DefaultVMMemoryOverheadMiB
	// vmTasks bounds a VMM's threads (vCPUs, I/O workers, RCU, ...).
	vmTasks = 512
)

// confinement is what the daemon holds to confine its VMMs.
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
func (s *Service) openConfinement() error {
	c := &s.confine
	c.uidsInUse = map[uint32]string{}
	c.root = os.Geteuid() == 0
	if _, err := os.Stat("/dev/userfaultfd"); err == nil {
		c.uffdDevice = true
	}
	if !c.root {
		s.log.Warn("thawd is not running as root: VMMs run as the daemon's user, without cgroups, in the daemon's network namespace")
		return nil
	}
	if s.cfg.CgroupRoot == "" {
		s.log.Warn("cgroups disabled by configuration: VMs have no memory or CPU limits")
		return nil
	}
	m, err := cgroup.Open(s.cfg.CgroupRoot, cgroupParentName(s.cfg.DataDir))
	if err != nil {
		return fmt.Errorf("cgroups for VMs: %w", err)
	}
	c.cgroups = m
	s.log.Info("vm cgroups", "version", m.Version(), "parent", m.Parent())
	if !c.uffdDevice {
		s.log.Warn("no /dev/userfaultfd (Linux before 6.1): reap restores and prepare's REAP record run QEMU as root")
	}
	return nil
}

// needsRoot says whether a VMM with this memory must run as root: a
// userfaultfd needs /dev/userfaultfd, or privileges, when
// vm.unprivileged_userfaultfd is 0.
func (c *confinement) needsRoot(m vmm.Memory) bool {
	return !c.uffdDevice && m.Backing.Kind == vmm.BackedByUffd
}

// confineSpec gives a VM its own user, cgroup and empty network namespace.
// release undoes it after the VMM has exited.
func (s *Service) confineSpec(spec *vmm.Spec) (release func(), err error) {
	c := &s.confine
	spec.ConsoleLimit = s.cfg.ConsoleLogLimit
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
		uid, err := s.allocUID(spec.ID)
		if err != nil {
			return release, err
		}
		spec.User = &vmm.User{UID: uid, GID: uid}
		undo = append(undo, func() { s.freeUID(uid) })
	}
	if c.cgroups != nil {
		limit := int64(spec.MemoryMiB+s.cfg.VMMemoryOverheadMiB) << 20
		g, err := c.cgroups.New(spec.ID, cgroup.Limits{MemoryBytes: limit, CPUWeight: s.cfg.VMCPUWeight, Tasks: vmTasks})
		if err != nil {
			return release, err
		}
		spec.Cgroup = g
		undo = append(undo, func() {
			if err := g.Remove(); err != nil {
				s.log.Warn("remove vm cgroup", "vm", spec.ID, "err", err)
			}
		})
	}
	return release, nil
}

func (s *Service) allocUID(vm string) (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &s.confine
	for i := uint32(0); i < s.cfg.VMUIDCount; i++ {
		uid := s.cfg.VMUIDBase + i
		if _, used := c.uidsInUse[uid]; !used {
			c.uidsInUse[uid] = vm
			return uid, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d VMM user ids are in use", ErrConflict, s.cfg.VMUIDCount)
}

func (s *Service) freeUID(uid uint32) {
	s.mu.Lock()
	delete(s.confine.uidsInUse, uid)
	s.mu.Unlock()
}

// validateConfinement checks the confinement settings of c.
func validateConfinement(c *Config) []error {
	var errs []error
	if c.VMUIDCount == 0 || uint64(c.VMUIDBase)+uint64(c.VMUIDCount) > 1<<32-2 {
		errs = append(errs, fmt.Errorf("vm user ids %d+%d do not fit below 4294967294", c.VMUIDBase, c.VMUIDCount))
	}
	if c.VMUIDBase < 1000 {
		errs = append(errs, fmt.Errorf("vm user id base %d overlaps system users", c.VMUIDBase))
	}
	if c.VMMemoryOverheadMiB < 64 {
		errs = append(errs, fmt.Errorf("vm memory overhead %d MiB is below 64 MiB", c.VMMemoryOverheadMiB))
	}
	if c.VMCPUWeight < 1 || c.VMCPUWeight > 10000 {
		errs = append(errs, fmt.Errorf("vm cpu weight %d is outside 1-10000", c.VMCPUWeight))
	}
	if c.ConsoleLogLimit < 4096 {
		errs = append(errs, fmt.Errorf("console log limit %d bytes is below 4096", c.ConsoleLogLimit))
	}
	if c.CgroupRoot != "" && !strings.HasPrefix(c.CgroupRoot, "/") {
		errs = append(errs, errors.New("cgroup root must be an absolute path"))
	}
	return errs
}
