// Package vmm describes a virtual machine monitor to the rest of thaw: what a
// VM is made of (Spec) and what can be done to a running one (Machine).
// The only implementation today is QEMU (package vmm/qemu); the daemon sees
// only this package, so a Firecracker or Cloud Hypervisor backend would slot
// in beside it.
package vmm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"time"

	"github.com/thaw-dev/thaw/internal/vmend"
)

// Accel is the CPU accelerator a VM runs on.
type Accel string

const (
	// AccelKVM is hardware virtualization; used when a probe guest boots on it.
	AccelKVM Accel = "kvm"
	// AccelTCG is QEMU's binary translator: slower guests, works everywhere.
	AccelTCG Accel = "tcg"
)

// ParseAccel validates an accelerator name ("auto" is handled by the caller).
func ParseAccel(s string) (Accel, error) {
	switch Accel(s) {
	case AccelKVM, AccelTCG:
		return Accel(s), nil
	}
	return "", fmt.Errorf("unknown accelerator %q (want kvm or tcg)", s)
}

// Disk is a raw block device image attached to the guest.
type Disk struct {
	Path     string
	ReadOnly bool
}

// Spec is everything needed to start a VM process.
type Spec struct {
	ID        string
	RunDir    string // private directory for sockets, logs; removed on cleanup
	MemoryMiB int
	VCPUs     int
	Accel     Accel
	Kernel    string
	Initrd    string
	Cmdline   string
	Disks     []Disk // in order: vda, vdb, ...
	Memory    Memory
	// Incoming starts the VM waiting for a device-state stream instead of
	// booting (restore from snapshot).
	Incoming bool

	// Confinement. The VMM opens none of thaw's files by path: the daemon
	// opens them and hands them over as descriptors (how a backend passes
	// a file where its VMM insists on a path is the backend's own matter).
	User   *User    // run the VMM as this user; nil: as the daemon's user
	Cgroup Cgroup   // the VMM's control group; nil: none
	Tap    *os.File // the guest NIC's tap device; nil: no network backend reaches anything
	// EmptyNetNS starts the VMM in a new network namespace of its own,
	// with no interface but a loopback that is down: it reaches no
	// network, not even the host's loopback services (the tap comes as a
	// descriptor). Needs CAP_SYS_ADMIN.
	EmptyNetNS bool
	// GenID is the VM generation ID (a UUID) of its vmgenid device: a new
	// one on every start, so a guest restored from a snapshot learns it is
	// a new clone and its kernel reseeds its random number generator.
	GenID string
	// ConsoleLimit bounds the guest console log kept in the run directory
	// (bytes); later output is dropped except its last part. 0: 1 MiB.
	ConsoleLimit int64
}

var genIDRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// NewGenID returns a random (version 4) UUID for Spec.GenID.
func NewGenID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// User is an unprivileged identity for a VMM process.
type User struct{ UID, GID uint32 }

// Cgroup is the control group a VMM process runs in.
type Cgroup interface {
	// FD is a cgroup v2 directory to clone the process into, or -1.
	FD() int
	// Add moves a started process in (cgroup v1).
	Add(pid int) error
	// MemoryCounters reads the group's memory limit and its OOM kills.
	MemoryCounters() (vmend.MemoryCounters, error)
}

// Validate reports every problem with a spec at once.
func (s *Spec) Validate() error {
	var errs []error
	if s.ID == "" {
		errs = append(errs, errors.New("missing id"))
	}
	if s.RunDir == "" {
		errs = append(errs, errors.New("missing run directory"))
	}
	if s.MemoryMiB < 64 {
		errs = append(errs, fmt.Errorf("memory %d MiB is below the 64 MiB minimum", s.MemoryMiB))
	}
	if s.VCPUs < 1 {
		errs = append(errs, fmt.Errorf("vcpus %d: need at least 1", s.VCPUs))
	}
	if _, err := ParseAccel(string(s.Accel)); err != nil {
		errs = append(errs, err)
	}
	if s.Kernel == "" || s.Initrd == "" {
		errs = append(errs, errors.New("missing kernel or initrd"))
	}
	errs = append(errs, s.Memory.problems(int64(s.MemoryMiB)<<20)...)
	if !genIDRE.MatchString(s.GenID) {
		errs = append(errs, fmt.Errorf("vm generation id %q is not a UUID", s.GenID))
	}
	return errors.Join(errs...)
}

// Exit describes how a VM process ended.
type Exit struct {
	At   time.Time
	Code int // process exit code, -1 if killed by a signal
	// Reason is End in words: the cause first, then the evidence (a guest
	// console line, the exit status, the end of the VMM's log).
	Reason string
	// Requested is true when thaw itself stopped the process.
	Requested bool
	// End is why the VM ended, read from Facts (package vmend); a caller
	// that knows more, such as why thaw stopped it, classifies Facts again.
	End   vmend.End
	Facts vmend.Facts
}

// ExitOf is the Exit of a VMM that ended now, as f tells.
func ExitOf(f vmend.Facts) Exit {
	end := vmend.Classify(f)
	return Exit{At: time.Now(), Code: f.ExitCode, Requested: f.Requested, Reason: end.String(), End: end, Facts: f}
}

// Backend is a virtual machine monitor: what the daemon needs to start
// VMs, know which monitor it runs, and probe accelerators.
type Backend interface {
	// Name and Version identify the monitor (recorded in snapshots).
	Name() string
	Version(ctx context.Context) (string, error)
	// MachineABI names the guest hardware Start builds (recorded in
	// snapshots; device state loads only into the same hardware).
	MachineABI() string
	// Start launches a VM process for spec.
	Start(ctx context.Context, spec Spec) (Machine, error)
	// ProbeAccel boots the guest kernel and initrd on accel and reports
	// whether a guest really booted there.
	ProbeAccel(ctx context.Context, accel Accel, kernel, initrd, workDir string, timeout time.Duration) ProbeResult
}

// ProbeResult says whether an accelerator booted a real guest.
type ProbeResult struct {
	Accel    Accel
	OK       bool
	Duration time.Duration
	Detail   string
}

// Machine is a running VMM process.
type Machine interface {
	// PID of the VMM process.
	PID() int
	// Agent is the host end of the guest agent's channel, connected from
	// the start; the caller owns it.
	Agent() net.Conn
	// Pause stops the vCPUs.
	Pause(ctx context.Context) error
	// Resume starts (or restarts) the vCPUs.
	Resume(ctx context.Context) error
	// SaveState writes the device state (not RAM, which stays in the memory
	// file) to path. The VM must be paused.
	SaveState(ctx context.Context, path string) error
	// LoadState reads device state from path into a VM started with
	// Spec.Incoming. The VM stays paused until Resume.
	LoadState(ctx context.Context, path string) error
	// Kill stops the process and waits for it to exit.
	Kill() error
	// Done is closed when the process has exited; Exit then describes how.
	Done() <-chan struct{}
	Exit() Exit
}
