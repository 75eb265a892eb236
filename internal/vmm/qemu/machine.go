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

// Args builds QEMU's command line for a spec. It is pure so tests can check
// it byte for byte; the memory backend options are the part restore
// strategies depend on.
func Args(s *vmm.Spec) []string {
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
		"-kernel", s.Kernel, "-initrd", s.Initrd, "-append", s.Cmdline,
	}
	for i, d := range s.Disks {
		id := fmt.Sprintf("disk%d", i)
		drive := "file=" + d.Path + ",if=none,id=" + id + ",format=raw"
		if d.ReadOnly {
			drive += ",readonly=on"
		}
		args = append(args, "-drive", drive, "-device", "virtio-blk-pci,drive="+id)
	}
	args = append(args,
		"-netdev", "user,id=net0",
		// romfile= skips loading the iPXE option ROM: the guest never
		// network-boots, and the ROM costs boot time under TCG.
		"-device", "virtio-net-pci,netdev=net0,romfile=",
		// Free page reporting: the guest tells QEMU which pages it freed and
		// QEMU discards them (a hole in a shared memory file), so freed pages
		// become zero pages without a patched guest kernel (FaaSnap §4.5
		// sanitized them with one).
		"-device", "virtio-balloon-pci,free-page-reporting=on",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=agent,path="+filepath.Join(s.RunDir, "agent.sock")+",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name="+AgentPortName,
		"-serial", "file:"+filepath.Join(s.RunDir, "console.log"),
		"-qmp", "unix:"+filepath.Join(s.RunDir, "qmp.sock")+",server=on,wait=off",
	)
	if s.Incoming {
		args = append(args, "-incoming", "defer")
	}
	return args
}

// Machine is a running QEMU process.
type Machine struct {
	spec    vmm.Spec
	cmd     *exec.Cmd
	qmp     *QMP
	logPath string

	mu        sync.Mutex
	requested bool
	exit      vmm.Exit
	done      chan struct{}
}

var _ vmm.Machine = (*Machine)(nil)

// Start launches QEMU for spec and connects to its QMP socket. The process is
// supervised: when it exits for any reason Done is closed and Exit says why.
func Start(ctx context.Context, spec vmm.Spec) (*Machine, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("vm spec: %w", err)
	}
	if err := os.MkdirAll(spec.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	logPath := filepath.Join(spec.RunDir, "qemu.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("qemu log: %w", err)
	}
	cmd := exec.Command(Binary, Args(&spec)...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), spec.Memory.Env...)
	// Own process group: a Ctrl-C aimed at the daemon does not kill VMs
	// behind its back; the daemon stops them itself. Pdeathsig covers the
	// daemon dying without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", Binary, err)
	}
	m := &Machine{spec: spec, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go m.supervise(logf)

	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	type dialResult struct {
		q   *QMP
		err error
	}
	ch := make(chan dialResult, 1)
	go func() { q, err := DialQMP(qctx, filepath.Join(spec.RunDir, "qmp.sock")); ch <- dialResult{q, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			_ = m.Kill()
			return nil, fmt.Errorf("qemu %s: %w (%s)", spec.ID, r.err, m.Exit().Reason)
		}
		m.qmp = r.q
	case <-m.done:
		cancel()
		return nil, fmt.Errorf("qemu %s exited during start-up: %s", spec.ID, m.Exit().Reason)
	}
	return m, nil
}

func (m *Machine) supervise(logf *os.File) {
	err := m.cmd.Wait()
	logf.Close()
	code := 0
	status := "exited with status 0"
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		status = ee.String()
	} else if err != nil {
		code = -1
		status = err.Error()
	}
	m.mu.Lock()
	m.exit = vmm.Exit{At: time.Now(), Code: code, Requested: m.requested}
	m.exit.Reason = "qemu " + status
	if tail := logTail(m.logPath, 400); tail != "" {
		m.exit.Reason += ": " + tail
	}
	m.mu.Unlock()
	if m.qmp != nil {
		m.qmp.Close()
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

// AgentSocket implements vmm.Machine.
func (m *Machine) AgentSocket() string { return filepath.Join(m.spec.RunDir, "agent.sock") }

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

// SaveState implements vmm.Machine. QEMU writes the stream itself through
// "exec:", so the path is quoted for the shell it runs.
func (m *Machine) SaveState(ctx context.Context, path string) error {
	if err := m.ignoreShared(ctx); err != nil {
		return err
	}
	if _, err := m.qmp.Execute(ctx, "migrate", map[string]any{"uri": "exec:cat > " + shellQuote(path)}); err != nil {
		return err
	}
	return m.qmp.WaitMigration(ctx)
}

// LoadState implements vmm.Machine.
func (m *Machine) LoadState(ctx context.Context, path string) error {
	if err := m.ignoreShared(ctx); err != nil {
		return err
	}
	if _, err := m.qmp.Execute(ctx, "migrate-incoming", map[string]any{"uri": "exec:cat " + shellQuote(path)}); err != nil {
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

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
