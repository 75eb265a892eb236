package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// bigHandler returns about event["n"] bytes of JSON: strings with escapes,
// non-ASCII and astral characters, the same for the same seed.
const bigHandler = `import json
import random

WORDS = ["caf\u00e9 ", "\u00e9t\u00e9 \U0001F600 ", 'quote " back \\ ', "line\nbreak\ttab ", "<&> ", "plain words "]


def handle(event):
    rng, n = random.Random(event["seed"]), event["n"]
    items, size = [], 0
    while size < n:
        item = rng.choice(WORDS) * rng.randint(100, 1000)
        items.append(item)
        size += len(json.dumps(item)) + 1
    return {"count": len(items), "items": items}
`

// A handler's 30 MB result reaches the caller byte for byte as the guest
// serialized it (python3 on the host serializes the same result to compare),
// the history keeps only its first bytes, a result over the limit is the
// handler's error naming the limit, and the VM serves on.
func TestLargeResult(t *testing.T) {
	parallel(t)
	e := startEnv(t, t.TempDir())
	ctx := ctxT(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte(bigHandler), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateFunctionFromDir(ctx, "big", dir, 512, 1); err != nil {
		t.Fatal(err)
	}
	vm, err := e.c.BootVM(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	event := json.RawMessage(`{"n":30000000,"seed":7}`)
	want := hostResult(t, dir, event)
	if len(want) < 30e6 || len(want) > agent.MaxResult {
		t.Fatalf("the handler makes %d bytes, want 30 MB to %d", len(want), agent.MaxResult)
	}
	opts := client.InvokeOptions{Timeout: 4 * time.Minute}
	t0 := time.Now()
	inv, err := e.c.InvokeVM(ctx, vm.ID, event, opts)
	if err != nil || !inv.OK {
		t.Fatalf("invoke: %v %+v", err, inv)
	}
	t.Logf("%d bytes in %s (guest %.0f ms)", len(inv.Result), time.Since(t0).Round(time.Millisecond), inv.Timing.GuestMS)
	if !bytes.Equal(inv.Result, want) {
		t.Fatalf("the caller got %d bytes, not the %d the guest serialized", len(inv.Result), len(want))
	}
	recs, err := e.c.ListInvocations(ctx, "big", 1)
	if err != nil || len(recs) != 1 || recs[0].ID != inv.ID {
		t.Fatalf("history: %v %+v", err, recs)
	}
	if d := recs[0].Detail; d.Result != nil || !d.ResultTruncated || d.ResultBytes != len(want) ||
		d.ResultPrefix != string(want[:daemon.DefaultMaxStoredResult]) {
		t.Fatalf("history keeps result %d bytes, truncated %v, %d bytes, prefix %d bytes", len(d.Result), d.ResultTruncated, d.ResultBytes, len(d.ResultPrefix))
	}

	inv, err = e.c.InvokeVM(ctx, vm.ID, json.RawMessage(`{"n":34000000,"seed":8}`), opts)
	if err != nil || inv.OK || inv.Error == nil || inv.Error.Type != "ResultTooLarge" ||
		!strings.Contains(inv.Error.Message, strconv.Itoa(agent.MaxResult)) {
		t.Fatalf("a result over the limit: %v %+v", err, inv)
	}
	t.Logf("over the limit: %s", inv.Error.Message)
	inv, err = e.c.InvokeVM(ctx, vm.ID, json.RawMessage(`{"n":10,"seed":9}`), opts)
	if err != nil || !inv.OK || !bytes.Equal(inv.Result, hostResult(t, dir, json.RawMessage(`{"n":10,"seed":9}`))) {
		t.Fatalf("the next invocation: %v %+v", err, inv)
	}
}

// hostResult is what handler.py in dir returns for event, serialized as the
// guest agent does, by the host's python3 (the guest's Python is Debian's
// of the same release).
func hostResult(t *testing.T, dir string, event json.RawMessage) []byte {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	cmd := exec.Command(py, "-c", `import json, sys
sys.path.insert(0, sys.argv[1])
import handler
sys.stdout.write(json.dumps(handler.handle(json.loads(sys.argv[2])), allow_nan=False, separators=(",", ":")))`, dir, string(event))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	return out
}
