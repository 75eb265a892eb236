package invoke

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/vms"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// world is a daemon as the invocations see it: fakes of every Deps, each
// recording what it was asked.
type world struct {
	t  *testing.T
	mu sync.Mutex
	lv *vms.Live // what Lock and the ready clones hand out

	past, takenKept, restores int      // requests past their checks (a VM locked, a reference read)
	stops                     []string // state: reason
	outcomes                  []string
	missed                    int
	recorded, failed          []*wire.Invocation
	failedErrs                []error
	renewal                   func() (agent.Renewal, error)
	clone                     bool // a ready clone is ready
	restoreNote               *wire.ReadyNote
}

var errRestore = errors.New("fake restore refused")

func newWorld(t *testing.T) *world { return &world{t: t} }

func (w *world) invoker() *Invoker {
	return New(Config{InvokeTimeout: 7 * time.Second, BootTimeout: 5 * time.Second, RemoteStrategy: "vanilla"}, Deps{
		Log: nopLog(), Catalog: w, VMs: w, Tracing: w, Ready: w,
		Restore: Restorer{Strategy: func(name string) (restore.Strategy, error) { return restore.Strategy{Kind: "vanilla"}, nil },
			Restore: func(ctx context.Context, sn *catalog.Snapshot, o RestoreOpts) (*vms.Live, *catalog.VM, *wire.RestoreTiming, error) {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.restores++
				w.restoreNote = ReadyNoteOf(ctx)
				return nil, nil, nil, errRestore
			},
			RefusedFallback: func(err error) error { return err },
			RefillLater:     func(string, restore.Kind, *catalog.Function) {},
			Renewal:         func(*vms.Live, bool) (agent.Renewal, error) { return w.renewal() },
			Renewed:         func(*vms.Live, *agent.Reply) {}},
		Cold: Cold{ParseRef: func(s string) (versions.Ref, error) {
			w.mu.Lock()
			w.past++
			w.mu.Unlock()
			return versions.ParseRef(s)
		},
			Gate:             func(string) *sync.RWMutex { return &sync.RWMutex{} },
			Resolve:          func(context.Context, versions.Ref) (Target, error) { return Target{}, nil },
			NewestSnapshotOf: func(context.Context, string, int) (string, error) { return "snap-1", nil },
			StaleNote:        func(string, int) string { return "" },
			GetSnapshot: func(_ context.Context, id string) (*catalog.Snapshot, error) {
				return &catalog.Snapshot{ID: id, Function: "echo"}, nil
			},
			Adaptive: w},
		Faults:      func() *faulttrace.Tracer { return nil },
		LazyFailure: func(*vms.Live) error { return nil },
		Logs:        func(context.Context, *agent.Reply) *wire.InvocationLogs { return nil },
		Record: func(_ context.Context, inv *wire.Invocation) {
			w.mu.Lock()
			w.recorded = append(w.recorded, inv)
			w.mu.Unlock()
		},
		RecordFailure: func(_ context.Context, inv *wire.Invocation, _ time.Time, err error) error {
			w.mu.Lock()
			w.failed, w.failedErrs = append(w.failed, inv), append(w.failedErrs, err)
			w.mu.Unlock()
			return err
		},
		Park:   func(*vms.Live, *catalog.VM, string) bool { return false },
		Retire: func(context.Context, *vms.Live, *catalog.VM, string) {},
		TakeKept: func(string, string) *Kept {
			w.mu.Lock()
			w.takenKept++
			w.mu.Unlock()
			return nil
		},
		Hold: func() (func(), bool) { return func() {}, true },
	})
}

// VMs.

func (w *world) Lock(_ context.Context, id string, _ ...string) (*vms.Live, error) {
	w.mu.Lock()
	w.past++
	w.mu.Unlock()
	if w.lv == nil || w.lv.ID != id {
		return nil, errors.New("no such vm")
	}
	w.lv.Mu.Lock()
	return w.lv, nil
}

func (w *world) Stop(_ context.Context, lv *vms.Live, state, reason string) {
	_ = lv.M.Kill()
	w.mu.Lock()
	w.stops = append(w.stops, state+": "+reason)
	w.mu.Unlock()
}

func (w *world) SetState(context.Context, *vms.Live, string, string) {}
func (w *world) Mark(*vms.Live, string)                              {}
func (w *world) WithAgent(ctx context.Context, _ *vms.Live, _ time.Duration, fn func(context.Context) error) error {
	return fn(ctx)
}

// Catalog.

func (w *world) DeleteVM(context.Context, string) error { return nil }
func (w *world) ListVersions(context.Context, string) ([]*catalog.Version, error) {
	return nil, nil
}

// Tracing.

func (w *world) Invoke(ctx context.Context, _ *wire.Invocation) (context.Context, func(error)) {
	return ctx, func(error) {}
}
func (w *world) Annotate(context.Context, *wire.Invocation)                       {}
func (w *world) AnnotateCold(context.Context, string, string)                     {}
func (w *world) On() bool                                                         { return true }
func (w *world) Begin(ReadyKey) Ticket                                            { return worldTicket{w} }
func (w *world) MeasureSet(restore.Session, int, string, *wire.Invocation)        {}
func (w *world) Observe(context.Context, *wire.Invocation, json.RawMessage, bool) {}

func (w *world) Outcome(outcome string, _ float64) {
	w.mu.Lock()
	w.outcomes = append(w.outcomes, outcome)
	w.mu.Unlock()
}

func (w *world) Settle(_ context.Context, _ ColdRequest, _ string, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice, Decide) {
	return st, &wire.StrategyChoice{How: "daemon"}, nil
}

// worldTicket is a request's ticket on the world's one ready clone.
type worldTicket struct{ w *world }

func (k worldTicket) Take() (*Clone, string) {
	if !k.w.clone {
		return nil, ""
	}
	k.w.clone = false
	return &Clone{VM: k.w.lv, Rec: &catalog.VM{ID: k.w.lv.ID, Function: "echo", Strategy: "vanilla"}, Since: time.Now()}, ""
}

func (k worldTicket) Missed() {
	k.w.mu.Lock()
	k.w.missed++
	k.w.mu.Unlock()
}

func (k worldTicket) Dispatch() func() { return func() {} }
func (k worldTicket) End()             {}

// fakeMachine is a VMM process that exits when killed or when its guest
// hangs up (exited).
type fakeMachine struct {
	once   sync.Once
	done   chan struct{}
	killed atomic.Bool
}

func (m *fakeMachine) PID() int                                { return os.Getpid() }
func (m *fakeMachine) Agent() net.Conn                         { return nil }
func (m *fakeMachine) Pause(context.Context) error             { return nil }
func (m *fakeMachine) Resume(context.Context) error            { return nil }
func (m *fakeMachine) SaveState(context.Context, string) error { return nil }
func (m *fakeMachine) LoadState(context.Context, string) error { return nil }
func (m *fakeMachine) Kill() error {
	m.killed.CompareAndSwap(false, !m.isDone())
	m.exited()
	return nil
}
func (m *fakeMachine) Done() <-chan struct{} { return m.done }
func (m *fakeMachine) Exit() vmm.Exit {
	if m.killed.Load() {
		return vmm.Exit{Requested: true}
	}
	return vmm.Exit{Reason: "guest ran out of memory"}
}

func (m *fakeMachine) isDone() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}
func (m *fakeMachine) exited() { m.once.Do(func() { close(m.done) }) }

// guestLine is one line the host sent the guest, and its id.
type guestLine struct {
	text string
	id   string
}

// liveVM is a VM of function echo whose guest agent runs serve on each
// line the host sends (and ends the VMM when serve says so).
func liveVM(t *testing.T, id string, serve func(l guestLine, reply func(string)) (exit bool)) *vms.Live {
	t.Helper()
	host, guest := net.Pipe()
	m := &fakeMachine{done: make(chan struct{})}
	t.Cleanup(func() { host.Close(); guest.Close(); m.exited() })
	go func() {
		rd := bufio.NewReader(guest)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			gl := guestLine{text: line}
			var req struct {
				ID string `json:"id"`
			}
			if json.Unmarshal([]byte(line), &req) == nil {
				gl.id = req.ID
			} else if f := strings.Fields(line); len(f) > 1 {
				gl.id = f[1]
			}
			if serve(gl, func(body string) {
				_, _ = io.WriteString(guest, `{"id":"`+gl.id+`",`+strings.TrimPrefix(body, "{")+"\n")
			}) {
				guest.Close()
				m.exited()
				return
			}
		}
	}()
	return &vms.Live{ID: id, Fn: &catalog.Function{Name: "echo"}, M: m, Agent: agent.NewConn(host)}
}

func nopLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
