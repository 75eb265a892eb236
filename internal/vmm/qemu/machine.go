// Package qemu runs VMs with QEMU (qemu-system-x86_64): argv construction,
// process supervision, QMP, snapshot device state and accelerator probing.
//
// Guest RAM is always a memory-backend-file. Booting maps it shared so the
// file holds RAM; restoring maps the snapshot's file private (copy-on-write),
// which is Firecracker's "File" memory backend. Device state moves through
// QEMU's migration stream with x-ignore-shared, so RAM is never copied into
// it (see ../../../docs/snapshot-format.md).
package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// Binary is the QEMU executable.
const Binary = "qemu-system-x86_64"

// AgentPortName is the virtio-serial port the guest agent opens.
const AgentPortName = "org.thaw.agent"

// MachineABI names the guest hardware Args builds, as recorded in every
// snapshot's manifest: device state only loads into the same devices (a
// different network backend or a missing device makes QEMU refuse the
// stream, or worse), so a daemon refuses snapshots of another machine.
// Change it whenever Args adds, removes or reconfigures a device.
const MachineABI = "pc+tap+vmgenid"

// GuestMAC is the guest NIC's address, the same in every VM (each has a
// network of its own).
const GuestMAC = "52:54:00:12:34:56"

// Sandbox is QEMU's seccomp policy: obsolete system calls, privilege
// changes, process creation and resource control are refused, so a guest
// that takes over QEMU cannot spawn a shell or raise its privileges.
const Sandbox = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"

// Descriptors are the numbers of the descriptors QEMU inherits (Start
// assigns them; Args only writes them into the command line).
type Descriptors struct {
	QMP, Agent, Console int
	Tap                 int   // 0: no tap device (user networking, restricted)
	Disks               []int // one per disk, in order
}

// Args builds QEMU's command line for a spec. It is pure so tests can check
// it byte for byte; the memory backend options are the part restore
// strategies depend on. Kernel, initrd and the memory file appear as paths
// that the interposer's file table resolves to descriptors.
func Args(s *vmm.Spec, fds Descriptors) []string {
	share := "off"
	if s.Memory.Shared {
		share = "on"
	}
	// TCG in QEMU 7.2 mis-emulates AVX2 gathers (vpgatherdd): numpy's AVX2
	// kernels segfault in the guest (np.maximum on float32, ...), killing
	// the agent. Guests under TCG get no AVX2; KVM passes the host's CPU.
	cpu := "max,avx2=off"
	if s.Accel == vmm.AccelKVM {
		cpu = "host"
	}
	mem := fmt.Sprintf("%dM", s.MemoryMiB)
	backend := "memory-backend-file,id=mem,size=" + mem + ",mem-path=" + s.Memory.Path + ",share=" + share
	if s.Memory.Align > 0 {
		// QEMU's qemu_ram_mmap() reserves size+align and maps guest RAM
		// at the first aligned address (the property exists for device-DAX).
		backend += ",align=" + strconv.FormatInt(s.Memory.Align, 10)
	}
	args := []string{
		"-name", "thaw-" + s.ID,
		"-machine", "pc,accel=" + string(s.Accel) + ",memory-backend=mem",
		"-cpu", cpu,
		"-smp", strconv.Itoa(s.VCPUs),
		"-m", mem,
		"-object", backend,
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-vga", "none",
		"-sandbox", Sandbox,
		"-kernel", s.Kernel, "-initrd", s.Initrd, "-append", s.Cmdline,
	}
	for i, d := range s.Disks {
		id := fmt.Sprintf("disk%d", i)
		set := i + 1
		drive := fmt.Sprintf("file=/dev/fdset/%d,if=none,id=%s,format=raw", set, id)
		if d.ReadOnly {
			drive += ",readonly=on"
		}
		args = append(args, "-add-fd", fmt.Sprintf("fd=%d,set=%d", fds.Disks[i], set),
			"-drive", drive, "-device", "virtio-blk-pci,drive="+id)
	}
	netdev := "user,id=net0,restrict=on"
	if fds.Tap > 0 {
		netdev = fmt.Sprintf("tap,id=net0,fd=%d,vhost=off", fds.Tap)
	}
	args = append(args,
		"-netdev", netdev,
		// romfile= skips loading the iPXE option ROM: the guest never
		// network-boots, and the ROM costs boot time under TCG.
		"-device", "virtio-net-pci,netdev=net0,romfile=,mac="+GuestMAC,
		// Free page reporting: the guest tells QEMU which pages it freed and
		// QEMU discards them (a hole in a shared memory file), so freed pages
		// become zero pages without a patched guest kernel (FaaSnap §4.5
		// sanitized them with one).
		"-device", "virtio-balloon-pci,free-page-reporting=on",
		"-device", "virtio-serial-pci",
		// The guest's kernel reseeds its RNG when the ID changes (a restore).
		"-device", "vmgenid,guid="+s.GenID,
		"-chardev", fmt.Sprintf("socket,id=agent,fd=%d", fds.Agent),
		"-device", "virtserialport,chardev=agent,name="+AgentPortName,
		"-chardev", fmt.Sprintf("socket,id=console,fd=%d", fds.Console),
		"-serial", "chardev:console",
		"-chardev", fmt.Sprintf("socket,id=qmp,fd=%d", fds.QMP),
		"-mon", "chardev=qmp,mode=control",
	)
	if s.Incoming {
		args = append(args, "-incoming", "defer")
	}
	return args
}

// Backend is QEMU as a vmm.Backend (New), with its settings.
type Backend struct{ settings Settings }

var _ vmm.Backend = Backend{}

// Name implements vmm.Backend.
func (Backend) Name() string { return Name }

// Version implements vmm.Backend.
func (Backend) Version(ctx context.Context) (string, error) { return Version(ctx) }

// MachineABI implements vmm.Backend.
func (Backend) MachineABI() string { return MachineABI }

// Start implements vmm.Backend.
func (b Backend) Start(ctx context.Context, spec vmm.Spec) (vmm.Machine, error) {
	m, err := Start(ctx, spec, b.settings)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ProbeAccel implements vmm.Backend.
func (Backend) ProbeAccel(ctx context.Context, accel vmm.Accel, kernel, initrd, workDir string, timeout time.Duration) vmm.ProbeResult {
	return ProbeAccel(ctx, accel, kernel, initrd, workDir, timeout)
}

// Machine is a running QEMU process.
type Machine struct {
	spec  vmm.Spec
	cmd   *exec.Cmd
	qmp   *QMP
	agent net.Conn
	logs  sync.WaitGroup // the console and QEMU log copies

	mu        sync.Mutex
	requested bool
	started   bool // QMP answered: start-up is over
	exit      vmm.Exit
	done      chan struct{}
}

var _ vmm.Machine = (*Machine)(nil)

// Start launches QEMU for spec, with the interposer of set preloaded, and
// negotiates QMP. QEMU runs as spec.User (if set) in spec.Cgroup under a
// seccomp sandbox, with a clean environment, and receives every file,
// socket and device as an inherited descriptor. The process is supervised:
// when it exits for any reason Done is closed and Exit says why.
func Start(ctx context.Context, spec vmm.Spec, set Settings) (*Machine, error) {
	return start(ctx, spec, set, Args)
}

// start is Start with the command line built by argv (the machine-options
// benchmark varies it).
func start(ctx context.Context, spec vmm.Spec, set Settings, argv func(*vmm.Spec, Descriptors) []string) (*Machine, error) {
	if err := errors.Join(spec.Validate(), set.Validate()); err != nil {
		return nil, fmt.Errorf("vm spec: %w", err)
	}
	if err := os.MkdirAll(spec.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	l, err := prepare(&spec, set.Shim)
	if err != nil {
		l.closeAll()
		return nil, err
	}
	m := &Machine{spec: spec, done: make(chan struct{})}
	cmd := exec.Command(Binary, argv(&spec, l.fds)...)
	cmd.Env = l.env
	cmd.ExtraFiles = l.files
	qemuLog, err := newCappedLog(filepath.Join(spec.RunDir, "qemu.log"), 256<<10)
	if err != nil {
		l.closeAll()
		return nil, fmt.Errorf("qemu log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = qemuLog, qemuLog
	cmd.SysProcAttr = procAttr(&spec)
	if err := cmd.Start(); err != nil {
		l.closeAll()
		qemuLog.Close()
		return nil, fmt.Errorf("start %s: %w", Binary, err)
	}
	m.cmd = cmd
	l.closeChildEnds()
	m.logs.Add(1)
	go func() {
		defer m.logs.Done()
		copyConsole(l.console, filepath.Join(spec.RunDir, "console.log"), spec.ConsoleLimit)
	}()
	go m.supervise(qemuLog)
	if spec.Cgroup != nil && spec.Cgroup.FD() < 0 {
		if err := spec.Cgroup.Add(cmd.Process.Pid); err != nil {
			l.qmp.Close()
			l.agent.Close()
			_ = m.Kill()
			return nil, fmt.Errorf("qemu %s: %w", spec.ID, err)
		}
	}
	m.agent = l.agent
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	type result struct {
		q   *QMP
		err error
	}
	ch := make(chan result, 1)
	go func() { q, err := NewQMP(qctx, l.qmp); ch <- result{q, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			// QMP fails at once when QEMU exits during start-up: let it.
			select {
			case <-m.done:
				return nil, fmt.Errorf("qemu %s exited during start-up: %s", spec.ID, m.Exit().Reason)
			case <-time.After(time.Second):
			}
			_ = m.Kill()
			return nil, fmt.Errorf("qemu %s: %w (%s)", spec.ID, r.err, m.Exit().Reason)
		}
		m.mu.Lock()
		m.qmp, m.started = r.q, true
		m.mu.Unlock()
	case <-m.done:
		cancel()
		return nil, fmt.Errorf("qemu %s exited during start-up: %s", spec.ID, m.Exit().Reason)
	}
	return m, nil
}

// procAttr is how QEMU's process starts for spec.
func procAttr(spec *vmm.Spec) *syscall.SysProcAttr {
	// Own process group: a Ctrl-C aimed at the daemon does not kill VMs
	// behind its back; the daemon stops them itself. Pdeathsig covers the
	// daemon dying without cleaning up (Go sets it after the user change).
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if spec.EmptyNetNS {
		// A fresh namespace for QEMU alone: a guest that takes QEMU over
		// finds no interface to reach anything through.
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if spec.User != nil {
		attr.Credential = &syscall.Credential{Uid: spec.User.UID, Gid: spec.User.GID, Groups: []uint32{}}
	}
	if spec.Cgroup != nil && spec.Cgroup.FD() >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, spec.Cgroup.FD()
	}
	return attr
}

func (m *Machine) supervise(qemuLog *cappedLog) {
	err := m.cmd.Wait() // also drains QEMU's output into qemuLog
	qemuLog.Close()
	m.logs.Wait() // the console reaches EOF once QEMU is gone
	m.mu.Lock()
	requested, started := m.requested, m.started
	m.mu.Unlock()
	exit := vmm.ExitOf(m.exitFacts(err, requested, started))
	m.mu.Lock()
	m.exit = exit
	q := m.qmp
	m.mu.Unlock()
	if q != nil {
		q.Close()
	}
	close(m.done)
}

// logTail returns up to n bytes from the end of a log, on one line.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.Join(strings.Fields(string(bytes.ToValidUTF8(b, nil))), " ")
}

// PID implements vmm.Machine.
func (m *Machine) PID() int { return m.cmd.Process.Pid }

// Agent implements vmm.Machine.
func (m *Machine) Agent() net.Conn { return m.agent }

// Pause implements vmm.Machine.
func (m *Machine) Pause(ctx context.Context) error {
	_, err := m.qmp.Execute(ctx, "stop", nil)
	return err
}

// Resume implements vmm.Machine.
func (m *Machine) Resume(ctx context.Context) error {
	_, err := m.qmp.Execute(ctx, "cont", nil)
	return err
}

// ignoreShared tells migration to skip RAM blocks backed by shared or file
// memory: RAM stays in the memory file, the stream carries only devices.
func (m *Machine) ignoreShared(ctx context.Context) error {
	_, err := m.qmp.Execute(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}},
	})
	return err
}

// SaveState implements vmm.Machine: the daemon creates the state file and
// hands QEMU its descriptor ("fd:" migration; no shell, no path for QEMU).
func (m *Machine) SaveState(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("device state file: %w", err)
	}
	return m.migrateFD(ctx, "migrate", f)
}

// LoadState implements vmm.Machine, reading the stream from a descriptor.
func (m *Machine) LoadState(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("device state file: %w", err)
	}
	return m.migrateFD(ctx, "migrate-incoming", f)
}

// migrateFD runs the migration command cmd ("migrate" or
// "migrate-incoming") on the descriptor of f, which it closes, without the
// shared RAM, and waits until it completes.
func (m *Machine) migrateFD(ctx context.Context, cmd string, f *os.File) error {
	defer f.Close()
	if err := m.ignoreShared(ctx); err != nil {
		return err
	}
	if _, err := m.qmp.ExecuteFD(ctx, "getfd", map[string]any{"fdname": "thaw-state"}, f); err != nil {
		return err
	}
	if _, err := m.qmp.Execute(ctx, cmd, map[string]any{"uri": "fd:thaw-state"}); err != nil {
		return err
	}
	return m.qmp.WaitMigration(ctx)
}

// Kill implements vmm.Machine: SIGKILL (guest state is disposable; snapshots
// are taken explicitly) and wait for the supervisor to reap the process.
func (m *Machine) Kill() error {
	m.mu.Lock()
	m.requested = true
	m.mu.Unlock()
	select {
	case <-m.done:
		return nil
	default:
	}
	_ = m.cmd.Process.Kill()
	select {
	case <-m.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("qemu %s (pid %d) did not exit after SIGKILL", m.spec.ID, m.PID())
	}
}

// Done implements vmm.Machine.
func (m *Machine) Done() <-chan struct{} { return m.done }

// Exit implements vmm.Machine.
func (m *Machine) Exit() vmm.Exit {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exit
}

// Version returns QEMU's version string, e.g. "7.2.22".
func Version(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, Binary, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", Binary, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(first)
	for i, w := range f {
		if w == "version" && i+1 < len(f) {
			return f[i+1], nil
		}
	}
	return strings.TrimSpace(first), nil
}
