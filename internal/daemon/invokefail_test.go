package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/wire"
)

// historyOf is the stored detail of invocation id in the history.
func historyOf(t *testing.T, s *Service, function, id string) *wire.InvocationRecord {
	t.Helper()
	recs, err := s.ListInvocations(context.Background(), function, 100, time.Time{}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if body := InvocationRecordBody(r); body.Detail.ID == id || (id == "" && body.VM != "") {
			return body
		}
	}
	return nil
}

// Timeouts and VM failures are recorded in the history (ok false, an
// error of type Timeout or VMFailed saying what happened), and a timeout's
// error names the flags that set it and says the VM was killed.
func TestFailedInvocationsAreRecorded(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.KeepAlive, c.InvokeTimeout = -1, 7*time.Second })
	ctx := context.Background()
	createFn(t, s, "echo")
	vm, err := s.BootVM(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`{"op":"hang"}`), Timeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("warm hang: %v", err)
	}
	for _, want := range []string{"vm " + vm.ID, "timed out after 200ms", "thaw invoke --timeout-ms", "thawd --invoke-timeout (7s on this daemon)",
		"the VM was killed (a guest that does not answer cannot be trusted)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("timeout error %q lacks %q", err, want)
		}
	}
	if v, _ := s.GetVM(ctx, vm.ID); v == nil || v.State != catalog.StateFailed {
		t.Errorf("the VM of a timed-out warm invocation is %+v, want failed", v)
	}
	recs, err := s.ListInvocations(ctx, "echo", 10, time.Time{}, "")
	if err != nil || len(recs) != 1 {
		t.Fatalf("history after a timeout: %v, %d records, want 1", err, len(recs))
	}
	r := InvocationRecordBody(recs[0])
	if r.OK || r.VM != vm.ID || r.Detail.Mode != "warm" || r.Detail.Error == nil || r.Detail.Error.Type != ErrorTypeTimeout ||
		!strings.Contains(r.Detail.Error.Message, "timed out after 200ms") || r.Detail.Timing.TotalMS < 200 {
		t.Errorf("timeout record: %+v (error %+v)", r, r.Detail.Error)
	}

	// Cold: a timeout and a VMM that dies are recorded too, with their
	// restore's timing.
	if _, err := s.BootVM(ctx, "echo"); err != nil {
		t.Fatal(err)
	}
	vms, _ := s.ListVMs(ctx)
	var booted string
	for _, v := range vms {
		if v.State == catalog.StateRunning {
			booted = v.ID
		}
	}
	if _, err := s.CreateSnapshot(ctx, booted); err != nil {
		t.Fatal(err)
	}
	for ev, typ := range map[string]string{`{"op":"hang"}`: ErrorTypeTimeout, `{"op":"crash"}`: ErrorTypeVMFailed} {
		_, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(ev), Timeout: 300 * time.Millisecond}})
		if err == nil {
			t.Fatalf("%s: no error", ev)
		}
		recs, _ := s.ListInvocations(ctx, "echo", 1, time.Time{}, "")
		r := InvocationRecordBody(recs[0])
		if r.OK || r.Detail.Mode != "cold" || r.Detail.Error == nil || r.Detail.Error.Type != typ ||
			r.Detail.Error.Message != err.Error() || r.Detail.Timing.Restore == nil || r.Snapshot == "" {
			t.Errorf("%s: record %+v (error %+v), want type %s and the answer's error %q", ev, r, r.Detail.Error, typ, err)
		}
	}
	// A handler's own exception is recorded as before, with its type.
	inv, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"op":"raise"}`)}})
	if err != nil || inv.OK {
		t.Fatalf("raise: %v %+v", err, inv)
	}
	if r := historyOf(t, s, "echo", inv.ID); r == nil || r.Detail.Error == nil || r.Detail.Error.Type != "ValueError" {
		t.Errorf("raise: record %+v", r)
	}
}
