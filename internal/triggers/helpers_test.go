package triggers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/wire"
)

// testInvoker stands in for the daemon (the seam the daemon's own tests
// fake too): functions are Go funcs, every call is recorded.
type testInvoker struct {
	mu      sync.Mutex
	fns     map[string]func(ev json.RawMessage) (*wire.Invocation, error)
	calls   []call
	n       int
	maxConc map[string]int
}

type call struct {
	ref   string
	event json.RawMessage
	at    time.Time
}

func newTestInvoker() *testInvoker {
	return &testInvoker{fns: map[string]func(json.RawMessage) (*wire.Invocation, error){}, maxConc: map[string]int{}}
}

func (ti *testInvoker) set(name string, f func(ev json.RawMessage) (*wire.Invocation, error)) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.fns[name] = f
}

func (ti *testInvoker) Invoke(ctx context.Context, ref string, event json.RawMessage, _ time.Duration) (*wire.Invocation, error) {
	name, _, _ := strings.Cut(ref, ":")
	ti.mu.Lock()
	f := ti.fns[name]
	ti.n++
	id := fmt.Sprintf("inv-%016x", ti.n)
	ti.calls = append(ti.calls, call{ref, append(json.RawMessage(nil), event...), time.Now()})
	ti.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("%w: function %s", daemon.ErrNotFound, name)
	}
	inv, err := f(event)
	if inv != nil {
		inv.ID, inv.Function = id, name
	}
	return inv, err
}

func (ti *testInvoker) CheckRef(_ context.Context, ref string) error {
	name, _, _ := strings.Cut(ref, ":")
	ti.mu.Lock()
	defer ti.mu.Unlock()
	if ti.fns[name] == nil {
		return fmt.Errorf("%w: function %s", daemon.ErrNotFound, name)
	}
	return nil
}

func (ti *testInvoker) MaxConcurrency(_ context.Context, name string) (int, error) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return ti.maxConc[name], nil
}

func (ti *testInvoker) callsOf(name string) []call {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	var out []call
	for _, c := range ti.calls {
		if strings.HasPrefix(c.ref, name) && (len(c.ref) == len(name) || c.ref[len(name)] == ':') {
			out = append(out, c)
		}
	}
	return out
}

func ok(result string) func(json.RawMessage) (*wire.Invocation, error) {
	return func(json.RawMessage) (*wire.Invocation, error) {
		return &wire.Invocation{OK: true, Result: json.RawMessage(result)}, nil
	}
}

// echo answers the event it got.
func echo(ev json.RawMessage) (*wire.Invocation, error) {
	return &wire.Invocation{OK: true, Result: ev}, nil
}

func raises(json.RawMessage) (*wire.Invocation, error) {
	return &wire.Invocation{OK: false, Error: &wire.FunctionError{Type: "ValueError", Message: "boom", Traceback: "Traceback (most recent call last): secret"}}, nil
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// echoEndpoint is a Triggers whose function echo answers with its event,
// with an HTTP endpoint of echo's.
func echoEndpoint(t *testing.T) *Triggers {
	t.Helper()
	inv := newTestInvoker()
	inv.set("echo", echo)
	tr := openTest(t, "", inv, nil)
	if _, err := tr.CreateEndpoint(context.Background(), wire.CreateEndpointRequest{Function: "echo"}); err != nil {
		t.Fatal(err)
	}
	return tr
}

// openTest opens triggers on an embedded engine in dir (a new temporary
// directory if empty) and starts them; they close at the test's end.
func openTest(t *testing.T, dir string, inv Invoker, mod func(*Config)) *Triggers {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := Config{DataDir: dir, NodeName: "n1", Backoff: 100 * time.Millisecond, AckWait: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := Open(context.Background(), cfg, inv, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	tr.Start(context.Background())
	t.Cleanup(tr.Close)
	return tr
}

// serveFunctions serves tr's functions listener on a loopback port.
func serveFunctions(t *testing.T, tr *Triggers) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := tr.FunctionsServer(ctx, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln := tcptest.Listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { cancel(); _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, d, what, cond)
}

func httpDo(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
