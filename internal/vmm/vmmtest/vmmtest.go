// Package vmmtest is a fake vmm.Backend for tests of the daemon and the
// API: its VMs are a sleeping process (so pids, /proc counters and kills
// are real) and a guest agent in Go. Only tests import it.
package vmmtest

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/vmend"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Fake is a vmm.Backend whose VMs are a sleeping process and a guest agent
// in Go answering on the agent channel. The daemon's service layer runs
// unchanged on it.
type Fake struct {
	mu      sync.Mutex
	specs   []vmm.Spec
	startFn func(spec vmm.Spec) error // fails a start when it returns an error
	ready   chan struct{}             // while open, guests do not answer pings
	secrets []map[string]string       // what each restore request set, in order
	renewed []string                  // each restore request's mode, in order (Renewals)
	fnErr   map[string]any            // a function error every pong reports (SetFunctionError)
	proto   int                       // the agent's protocol (SetAgentProtocol); 0: AgentProtocol
}

// AgentProtocol is the protocol the fake's agent speaks unless told
// otherwise: the guest agent's ("thaw-agent/6").
const AgentProtocol = 6

// SetAgentProtocol makes guests started from now on speak protocol p: 5
// is an agent before ready clones' requests (it refuses a restore line
// with a mode as malformed JSON, and the warm-up function), 6 the
// current one.
func (b *Fake) SetAgentProtocol(p int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.proto = p
}

func (b *Fake) agentProtocol() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proto == 0 {
		return AgentProtocol
	}
	return b.proto
}

// Renewals are the modes of the restore requests so far, in order:
// "nohook" (the function's on_restore hook did not run), "invoke" (it ran,
// and an invocation came on the same line) or "" (it ran).
func (b *Fake) Renewals() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.renewed...)
}

// Secrets are the secrets (environment name -> value) each restore request
// so far set in its guest, in order; a restore without secrets is an
// empty map.
func (b *Fake) Secrets() []map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]map[string]string(nil), b.secrets...)
}

// bootEnv is the environment a booting guest's agent sets from its code
// disk (.thaw/config.json), read from the tree the disk was built from
// (<dir of the disk>/code), as the real agent reads it from the disk.
func bootEnv(spec vmm.Spec) map[string]string {
	if len(spec.Disks) < 2 {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(spec.Disks[1].Path), "code", ".thaw", "config.json"))
	if err != nil {
		return nil
	}
	var doc struct {
		Env map[string]string `json:"env"`
	}
	_ = json.Unmarshal(b, &doc)
	return doc.Env
}

// SetFunctionError makes guests report that their function cannot be
// invoked (the agent's function_error: type, message, traceback); nil:
// they do not.
func (b *Fake) SetFunctionError(typ, message, traceback string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fnErr = map[string]any{"type": typ, "message": message, "traceback": traceback}
	if typ == "" {
		b.fnErr = nil
	}
}

// SetStart makes every start call fn first, failing when it fails (nil:
// starts succeed).
func (b *Fake) SetStart(fn func(vmm.Spec) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.startFn = fn
}

// HoldReady makes guests not answer pings (so boots wait for their agent)
// until release is called.
func (b *Fake) HoldReady() (release func()) {
	ch := make(chan struct{})
	b.mu.Lock()
	b.ready = ch
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (b *Fake) held() bool {
	b.mu.Lock()
	ch := b.ready
	b.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// Specs are the specs of every start so far.
func (b *Fake) Specs() []vmm.Spec {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]vmm.Spec(nil), b.specs...)
}

// Spec is the spec of the i-th start.
func (b *Fake) Spec(i int) vmm.Spec {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.specs[i]
}

func (b *Fake) Name() string                            { return "fake" }
func (b *Fake) Version(context.Context) (string, error) { return "1.0", nil }
func (b *Fake) MachineABI() string                      { return "fake-machine" }
func (b *Fake) ProbeAccel(_ context.Context, a vmm.Accel, _, _, _ string, _ time.Duration) vmm.ProbeResult {
	return vmm.ProbeResult{Accel: a, Detail: "fake"}
}

func (b *Fake) Start(_ context.Context, spec vmm.Spec) (vmm.Machine, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.specs = append(b.specs, spec)
	fn := b.startFn
	b.mu.Unlock()
	if fn != nil {
		if err := fn(spec); err != nil {
			return nil, err
		}
	}
	if err := openBacking(spec.Memory); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(spec.RunDir, 0o700); err != nil { // as QEMU's start does
		return nil, err
	}
	env := 0
	if spec.Memory.Shared { // a booting VM's RAM: some pages written
		f, err := os.OpenFile(spec.Memory.Path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		f.Truncate(int64(spec.MemoryMiB) << 20)
		f.WriteAt([]byte("guest kernel and the function, imported"), 4096)
		// The environment the agent set at boot is in guest memory.
		off := int64(8192)
		for k, v := range bootEnv(spec) {
			n, _ := f.WriteAt([]byte(k+"="+v+"\x00"), off)
			off += int64(n)
			env++
		}
		f.Close()
	} else if _, err := os.Stat(spec.Memory.Path); err != nil {
		return nil, fmt.Errorf("memory file: %w", err)
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	host, guest := net.Pipe()
	m := &fakeMachine{cmd: cmd, agent: host, done: make(chan struct{}), env: env}
	go m.wait()
	go fakeAgent(guest, m, b)
	return m, nil
}

// openBacking reaches what backs restored memory as a real backend would:
// a layout's files are there, a userfaultfd socket answers.
func openBacking(m vmm.Memory) error {
	switch b := m.Backing; b.Kind {
	case vmm.BackedByUffd:
		c, err := net.Dial("unix", b.UffdSocket)
		if err != nil {
			return fmt.Errorf("userfaultfd socket: %w", err)
		}
		c.Close()
	case vmm.BackedByLayout:
		for _, p := range []string{b.Layout.LoadingSet, b.Layout.Device} {
			if _, err := os.Stat(p); p != "" && err != nil {
				return fmt.Errorf("memory layout: %w", err)
			}
		}
	}
	return nil
}

type fakeMachine struct {
	cmd   *exec.Cmd
	agent net.Conn
	done  chan struct{}

	mu        sync.Mutex
	requested bool
	exit      vmm.Exit
	paused    bool
	loaded    string // the device state it was restored from
	env       int    // environment variables its agent set at boot
	served    int    // invocations its agent answered (its agent goroutine's alone)
}

func (m *fakeMachine) wait() {
	err := m.cmd.Wait()
	m.mu.Lock()
	f := vmend.ProcessFacts(m.cmd.ProcessState, m.requested)
	f.VMMLog = "fake vmm: " + fmt.Sprint(err)
	m.exit = vmm.ExitOf(f)
	m.mu.Unlock()
	// As with QEMU, the process is gone before its agent channel closes:
	// a read that fails on the channel finds the VMM done.
	close(m.done)
	m.agent.Close()
}

func (m *fakeMachine) PID() int              { return m.cmd.Process.Pid }
func (m *fakeMachine) Agent() net.Conn       { return m.agent }
func (m *fakeMachine) Done() <-chan struct{} { return m.done }
func (m *fakeMachine) Exit() vmm.Exit {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exit
}
func (m *fakeMachine) Pause(context.Context) error  { m.setPaused(true); return nil }
func (m *fakeMachine) Resume(context.Context) error { m.setPaused(false); return nil }
func (m *fakeMachine) setPaused(p bool) {
	m.mu.Lock()
	m.paused = p
	m.mu.Unlock()
}

func (m *fakeMachine) SaveState(_ context.Context, path string) error {
	return os.WriteFile(path, []byte("fake device state"), 0o600)
}

func (m *fakeMachine) LoadState(_ context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.loaded = string(b)
	m.mu.Unlock()
	return nil
}

func (m *fakeMachine) Kill() error {
	m.mu.Lock()
	m.requested = true
	m.mu.Unlock()
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	return nil
}

// fakeAgent answers the agent protocol. Events steer it: {"op":"crash"}
// kills the "VMM", {"op":"hang"} never answers, {"op":"raise"} fails in
// the handler, {"op":"big","bytes":N} returns a JSON string of N bytes
// (xyz... repeated), {"op":"sleep","ms":N} answers after N ms,
// {"op":"served"} returns how many invocations this guest answered before
// (a clone's state: its own count, from 0 after a restore); anything
// else is echoed. Its replies carry logs as a protocol 5 agent's do: the
// event's "print" as output and "kernel" as kernel messages (none if
// absent), or no logs at all with {"op":"nologs"} (an older agent).
// Pings go unanswered while b holds guests back (HoldReady). It speaks
// the protocol b was set to (SetAgentProtocol) when the guest started.
func fakeAgent(c net.Conn, m *fakeMachine, b *Fake) {
	rd := bufio.NewReader(c)
	enc := json.NewEncoder(c)
	proto := b.agentProtocol()
	var next []byte // the invoke request that came with a renewal
	for {
		line := next
		if next = nil; line == nil {
			var err error
			if line, err = rd.ReadBytes('\n'); err != nil {
				return
			}
		}
		req, secrets, ok := parseAgentRequest(line, proto)
		if !ok {
			if err := enc.Encode(map[string]any{"id": nil, "ok": false, "error": map[string]any{"type": "BadRequest",
				"message": "malformed JSON"}}); err != nil {
				return
			}
			continue
		}
		reply := map[string]any{"id": req.ID, "ok": true}
		switch req.Op {
		case "ping":
			if b.held() {
				continue
			}
			reply["op"] = "pong"
			reply["agent"] = fmt.Sprintf("thaw-agent/%d", proto)
			reply["env"] = m.env
			b.mu.Lock()
			if b.fnErr != nil {
				reply["function_error"] = b.fnErr
			}
			b.mu.Unlock()
		case "restore":
			reply["duration_ms"] = 0.5
			reply["reseeded"] = []string{"kernel", "random"}
			reply["hook"] = map[string]any{"ran": !req.noHook}
			reply["secrets"] = len(secrets)
			b.mu.Lock()
			b.secrets = append(b.secrets, secrets)
			b.renewed = append(b.renewed, req.mode)
			b.mu.Unlock()
			next = req.then
		case "clock":
		case "invoke":
			if !invokeReply(reply, req, m, proto) {
				continue
			}
		default:
			reply["ok"] = false
			reply["error"] = map[string]any{"type": "BadRequest", "message": "unknown op"}
		}
		if err := enc.Encode(reply); err != nil && !errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// agentRequest is a request to the agent: a JSON line, or a plain-line
// restore.
type agentRequest struct {
	ID       string          `json:"id"`
	Op       string          `json:"op"`
	Function string          `json:"function"`
	Event    json.RawMessage `json:"event"`
	// A restore line's mode (protocol 6: Renewals) and the invoke request
	// that follows the renewal ("invoke").
	mode   string
	noHook bool
	then   []byte
}

// parseAgentRequest reads one request line and the secrets a restore
// request carries; ok is false for a line that is neither (nor, before
// protocol 6, a restore line with a mode).
func parseAgentRequest(line []byte, proto int) (agentRequest, map[string]string, bool) {
	var req agentRequest
	secrets := map[string]string{}
	f := strings.SplitN(strings.TrimSuffix(string(line), "\n"), " ", 7)
	if len(f) >= 6 && f[0] == "restore" {
		switch {
		case proto < 6:
			return req, nil, false
		case len(f) == 6 && f[5] == "nohook":
			req.noHook = true
		case len(f) == 7 && f[5] == "invoke":
			req.then = []byte(f[6])
		default:
			return req, nil, false
		}
		req.mode = f[5]
	}
	if (len(f) >= 4 && len(f) <= 7) && f[0] == "restore" {
		req.ID, req.Op = f[1], "restore" // the plain-line restore request
		if len(f) >= 5 && f[4] != "-" {
			raw, _ := hex.DecodeString(f[4])
			for _, e := range strings.Split(string(raw), "\x00") {
				k, v, _ := strings.Cut(e, "=")
				secrets[k] = v
			}
		}
	} else if json.Unmarshal(line, &req) != nil {
		return req, nil, false
	}
	return req, secrets, true
}

// invokeReply fills reply to an invocation as the event steers it (see
// fakeAgent); it returns false when the agent must not answer (the "VMM"
// crashed, or the handler hangs).
func invokeReply(reply map[string]any, req agentRequest, m *fakeMachine, proto int) bool {
	var ev struct {
		Op            string
		Bytes         int
		MS            int
		Print, Kernel string
	}
	_ = json.Unmarshal(req.Event, &ev)
	if req.Function == "thaw:warm-up" && proto >= 6 { // the built-in handler: echoes, counts nothing
		reply["result"], reply["duration_ms"] = req.Event, 0.1
		reply["logs"] = map[string]any{"output": "", "bytes": 0}
		return true
	}
	if strings.Contains(req.Function, ":") { // no function has such a name: the agent refuses it first
		reply["ok"] = false
		reply["error"] = map[string]any{"type": "FunctionNotFound", "message": "this VM serves another function"}
		return true
	}
	if ev.Op != "nologs" {
		reply["logs"] = map[string]any{"output": ev.Print, "bytes": len(ev.Print), "kernel": ev.Kernel}
	}
	m.served++
	switch ev.Op {
	case "served":
		reply["result"] = m.served - 1
	case "sleep":
		time.Sleep(time.Duration(ev.MS) * time.Millisecond)
		reply["result"] = req.Event
	case "crash":
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		return false
	case "hang":
		return false
	case "raise":
		reply["ok"] = false
		reply["error"] = map[string]any{"type": "ValueError", "message": "asked to"}
	case "big":
		reply["result"] = BigResult(ev.Bytes)
	default:
		reply["result"] = req.Event
	}
	reply["duration_ms"] = 0.1
	return true
}

// WriteImage writes a guest image description whose files are tiny.
func WriteImage(dir string) error {
	files := map[string]int{"vmlinuz": 10, "initrd.img": 20, "rootfs.ext4": 30}
	desc := map[string]any{}
	for name, size := range files {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			return err
		}
		desc[name] = map[string]any{"size": size, "sha256": fmt.Sprintf("%064x", size)}
	}
	b, _ := json.Marshal(map[string]any{"format": 1, "hash": "fake", "kernel_version": "6.1-fake",
		"files": desc, "cmdline": "console=ttyS0"})
	return os.WriteFile(filepath.Join(dir, "image.json"), b, 0o644)
}

// Host is what a whole daemon on the fake VMM needs of the machine besides
// its configuration.
type Host struct {
	ImageDir string // a guest image (WriteImage)
	DataDir  string // an empty data directory
	StoreDir string // the memory store's directory in /dev/shm, removed when the test ends
}

// NewHost skips t unless it runs as root (the daemon's VM set-up: users,
// cgroups, network namespaces), and makes the guest image and the
// directories. The store directory is /dev/shm/<storePrefix><unique>.
func NewHost(t testing.TB, storePrefix string) Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the daemon's VM set-up (users, cgroups, network namespaces) needs root")
	}
	img := t.TempDir()
	if err := WriteImage(img); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	store := filepath.Join("/dev/shm", storePrefix+filepath.Base(filepath.Dir(data))+filepath.Base(data))
	t.Cleanup(func() { os.RemoveAll(store) })
	return Host{ImageDir: img, DataDir: data, StoreDir: store}
}

// BigResult is what the fake agent returns for {"op":"big","bytes":n}.
func BigResult(n int) json.RawMessage {
	b := make([]byte, max(n, 2))
	for i := range b {
		b[i] = "xyz"[i%3]
	}
	b[0], b[len(b)-1] = '"', '"'
	return b
}
