package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// The commands that start operations follow them, showing each phase on
// stderr, and print the result as the synchronous commands did.
func TestOperationsFollowed(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "vm", "boot", "hello")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "vm-run", "hello", "running")
	wantContains(t, "stderr", r.stderr, "op-boot boot hello: starting vmm\n", "op-boot boot hello: booting\n", "op-boot boot hello: succeeded\n")
	if !slices.Contains(f.requests, "POST /v1/vms?wait=false") {
		t.Errorf("boot did not start an operation: %v", f.requests)
	}
	var body map[string]string
	if err := json.Unmarshal(f.body("POST /v1/vms"), &body); err != nil || body["function"] != "hello" {
		t.Errorf("boot body %s (%v)", f.body("POST /v1/vms"), err)
	}

	r = f.thaw(t, "snapshot", "store", "snap-1")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "stored snap-1: 100.0 MiB of 256.0 MiB guest memory in 6 regions")
	wantContains(t, "stderr", r.stderr, "op-store store snap-1: copying to the store")

	r = f.thaw(t, "prepare", "hello")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "Function:", "hello", "Clean snapshot:", "snap-2")
	wantContains(t, "stderr", r.stderr, "record faasnap (0 of 3 strategies)")

	r = f.thaw(t, "--json", "snapshot", "copy", "snap-1")
	wantCode(t, r, 0)
	var sn struct{ ID string }
	if err := json.Unmarshal([]byte(r.stdout), &sn); err != nil || sn.ID != "snap-2" {
		t.Errorf("--json copy printed %q (%v), want the new snapshot", r.stdout, err)
	}
	wantContains(t, "stderr", r.stderr, "copying (1.0 MiB of 100.0 MiB)")
}

// --detach prints the operation's id (or, with --json, the operation) and
// returns without following it.
func TestOperationsDetach(t *testing.T) {
	for _, c := range []struct {
		args []string
		id   string
	}{
		{[]string{"vm", "boot", "hello"}, "op-boot"},
		{[]string{"prepare", "hello"}, "op-prep"},
		{[]string{"snapshot", "store", "snap-1"}, "op-store"},
		{[]string{"snapshot", "copy", "snap-1"}, "op-copy"},
	} {
		f := newFakeDaemon(t)
		r := f.thaw(t, append(c.args, "--detach")...)
		wantCode(t, r, 0)
		if r.stdout != c.id+"\n" || r.stderr != "" {
			t.Errorf("%v --detach: stdout %q stderr %q, want just the id %s", c.args, r.stdout, r.stderr, c.id)
		}
		for _, req := range f.requests {
			if strings.Contains(req, "/v1/operations") {
				t.Errorf("%v --detach polled the operation: %v", c.args, f.requests)
			}
		}
		r = f.thaw(t, append([]string{"--json"}, append(c.args, "-d")...)...)
		wantCode(t, r, 0)
		var op struct{ ID, State string }
		if err := json.Unmarshal([]byte(r.stdout), &op); err != nil || op.ID != c.id || op.State != "running" {
			t.Errorf("--json %v -d printed %q (%v), want the running operation", c.args, r.stdout, err)
		}
	}
	f := newFakeDaemon(t)
	wantCode(t, f.thaw(t, "snapshot", "store", "--remove", "--detach", "snap-1"), 2)
}

func TestOperationGetListWait(t *testing.T) {
	f := newFakeDaemon(t)
	lines := tableLines(t, f, 2, "operation", "list")
	wantContains(t, "table", strings.Join(lines, "\n"), "KIND", "op-boot", "succeeded", "op-copy", "copying (1.0 MiB of 100.0 MiB)")
	r := f.thaw(t, "operation", "get", "op-copy")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "op-copy", "copy", "snap-1", "running")

	r = f.thaw(t, "operation", "wait", "op-copy")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "copied snap-1 to snap-2")

	r = f.thaw(t, "operation", "wait", "op-fail")
	wantFailure(t, r, 1, "op-fail prepare broken: failed", "thaw: vm vm-1: guest agent not ready")
	r = f.thaw(t, "prepare", "broken")
	wantFailure(t, r, 1, "guest agent not ready")

	r = f.thaw(t, "operation", "get", "op-nope")
	wantFailure(t, r, 1, "not found")
}

// Ctrl-C while following detaches: the operation goes on, and thaw says
// how to follow it again.
func TestOperationInterruptDetaches(t *testing.T) {
	f := newFakeDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(700*time.Millisecond, cancel)
	var out, errb bytes.Buffer
	code := execute(ctx, []string{"--url", f.URL, "operation", "wait", "op-slow"}, strings.NewReader(""), &out, &errb)
	t.Logf("stderr: %s", errb.String())
	if code != cli.ExitError || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q", code, out.String())
	}
	wantContains(t, "stderr", errb.String(), "op-slow boot hello: booting", "interrupted; operation op-slow goes on in thawd: follow it with 'thaw operation wait op-slow'")
	for _, req := range f.requests {
		if strings.HasPrefix(req, "DELETE") {
			t.Errorf("interrupting sent %s", req)
		}
	}
}
