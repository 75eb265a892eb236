// Package second is a second VMM backend, a fake one, registered under its
// own name: everything a backend needs is in its folder (its code, its
// registration, its run of the conformance suite); nothing outside changes.
// Unlike vmmtest.Fake, its guests run only between Resume and Pause, and a
// restored one only after its device state is loaded.
package second

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/vmend"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Name is the name the backend registers under.
const Name = "second-fake"

func init() {
	vmm.Register(Name, func(s vmm.Settings) (vmm.Backend, error) {
		if err := vmm.UnknownSettings(s); err != nil { // it takes none
			return nil, err
		}
		return backend{}, nil
	})
}

type backend struct{}

func (backend) Name() string                            { return Name }
func (backend) Version(context.Context) (string, error) { return "2.0", nil }
func (backend) MachineABI() string                      { return "second-machine-1" }
func (backend) ProbeAccel(_ context.Context, a vmm.Accel, _, _, _ string, _ time.Duration) vmm.ProbeResult {
	return vmm.ProbeResult{Accel: a, Detail: "second-fake runs no guest code"}
}

func (backend) Start(_ context.Context, spec vmm.Spec) (vmm.Machine, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("vm spec: %w", err)
	}
	if err := os.MkdirAll(spec.RunDir, 0o700); err != nil {
		return nil, err
	}
	if err := openMemory(spec); err != nil {
		return nil, err
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	host, guest := net.Pipe()
	m := &machine{cmd: cmd, agent: host, done: make(chan struct{}), incoming: spec.Incoming, running: !spec.Incoming}
	m.cond = sync.NewCond(&m.mu)
	go m.wait()
	go m.serve(guest)
	return m, nil
}

// openMemory opens what backs guest memory: a boot's file is created at
// its size, a restore's must exist, and so must a layout's files and a
// userfaultfd socket's listener.
func openMemory(spec vmm.Spec) error {
	mem := spec.Memory
	if mem.Shared {
		f, err := os.OpenFile(mem.Path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("guest memory: %w", err)
		}
		defer f.Close()
		return f.Truncate(int64(spec.MemoryMiB) << 20)
	}
	paths := []string{mem.Path}
	if l := mem.Backing.Layout; l != nil {
		paths = append(paths, l.LoadingSet, l.Device)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); p != "" && err != nil {
			return fmt.Errorf("guest memory: %w", err)
		}
	}
	if mem.Backing.Kind == vmm.BackedByUffd {
		c, err := net.Dial("unix", mem.Backing.UffdSocket)
		if err != nil {
			return fmt.Errorf("userfaultfd socket: %w", err)
		}
		c.Close()
	}
	return nil
}

type machine struct {
	cmd   *exec.Cmd
	agent net.Conn
	done  chan struct{}

	mu        sync.Mutex
	cond      *sync.Cond
	incoming  bool // waiting for device state
	running   bool // vCPUs run: the agent answers
	requested bool
	exit      vmm.Exit
}

func (m *machine) wait() {
	_ = m.cmd.Wait()
	m.mu.Lock()
	m.exit = vmm.ExitOf(vmend.ProcessFacts(m.cmd.ProcessState, m.requested))
	m.running = false
	m.cond.Broadcast()
	m.mu.Unlock()
	close(m.done)
	m.agent.Close()
}

func (m *machine) PID() int              { return m.cmd.Process.Pid }
func (m *machine) Agent() net.Conn       { return m.agent }
func (m *machine) Done() <-chan struct{} { return m.done }
func (m *machine) Exit() vmm.Exit {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exit
}

func (m *machine) Pause(context.Context) error { return m.setRunning(false) }
func (m *machine) Resume(context.Context) error {
	return m.setRunning(true)
}

func (m *machine) setRunning(r bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.incoming {
		return errors.New("no device state loaded yet")
	}
	m.running = r
	m.cond.Broadcast()
	return nil
}

func (m *machine) SaveState(_ context.Context, path string) error {
	m.mu.Lock()
	running := m.running
	m.mu.Unlock()
	if running {
		return errors.New("save state: the vm is running")
	}
	return os.WriteFile(path, []byte("second-fake state"), 0o600)
}

func (m *machine) LoadState(_ context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(b) != "second-fake state" {
		return errors.New("load state: not this backend's device state")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.incoming {
		return errors.New("load state: the vm was not started for a restore")
	}
	m.incoming = false
	return nil
}

func (m *machine) Kill() error {
	m.mu.Lock()
	m.requested = true
	m.mu.Unlock()
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	return nil
}

// serve answers every request ok once the vCPUs run: JSON requests and
// the plain-line restore request.
func (m *machine) serve(c net.Conn) {
	rd := bufio.NewReader(c)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		m.mu.Lock()
		for !m.running && m.exit.At.IsZero() {
			m.cond.Wait()
		}
		m.mu.Unlock()
		var req struct {
			ID string `json:"id"`
		}
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "restore" {
			req.ID = f[1]
		} else if json.Unmarshal([]byte(line), &req) != nil {
			continue
		}
		b, _ := json.Marshal(map[string]any{"id": req.ID, "ok": true})
		if _, err := c.Write(append(b, '\n')); err != nil {
			return
		}
	}
}
