package invoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
)

// A malformed event, or a timeout outside 1 ms-1 h, is refused with
// ErrInvalid before anything is locked, resolved or restored.
func TestRefusesBadRequests(t *testing.T) {
	big := append(append([]byte(`"`), bytes.Repeat([]byte("a"), MaxEventBytes)...), '"')
	for _, tc := range []struct {
		name string
		req  InvokeRequest
		want string
	}{
		{"not JSON", InvokeRequest{Event: json.RawMessage(`{"a":`)}, "not valid JSON"},
		{"too big", InvokeRequest{Event: big}, "the limit is 6291456"},
		{"timeout over the limit", InvokeRequest{Timeout: MaxTimeout + time.Millisecond}, "between 1 ms and 1 h"},
		{"negative timeout", InvokeRequest{Timeout: -time.Second}, "between 1 ms and 1 h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			v := w.invoker()
			_, warm := v.InvokeVM(context.Background(), "vm-000000000001", tc.req)
			_, cold := v.InvokeCold(context.Background(), ColdRequest{InvokeRequest: tc.req, Function: "echo"})
			for _, err := range []error{warm, cold} {
				if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %v, want ErrInvalid saying %q", err, tc.want)
				}
			}
			if w.past != 0 || w.restores != 0 {
				t.Errorf("a refused request went on: %d past their checks, %d restores", w.past, w.restores)
			}
		})
	}
	v := newWorld(t).invoker()
	if d, err := v.Timeout(0); err != nil || d != 7*time.Second {
		t.Errorf("Timeout(0) = %v, %v; want the daemon's 7s", d, err)
	}
	if d, err := v.Timeout(MaxTimeout); err != nil || d != MaxTimeout {
		t.Errorf("Timeout(1h) = %v, %v; want 1h", d, err)
	}
}

// A ready clone whose renewal fails before the event reached it is
// stopped and the request falls back (to a restore here, with the reason
// in its context); one whose renewal went with the event
// (agent.ErrEventSent) fails the request, which runs nowhere else.
func TestReadyRenewalFailure(t *testing.T) {
	t.Run("before the event", func(t *testing.T) {
		w := newWorld(t)
		w.lv = liveVM(t, "vm-000000000001", func(guestLine, func(string)) bool {
			t.Error("the guest got a line, though the renewal failed before any was sent")
			return false
		})
		w.clone = true
		w.renewal = func() (agent.Renewal, error) { return agent.Renewal{}, errors.New("secret gone") }
		_, err := w.invoker().InvokeCold(context.Background(), ColdRequest{Function: "echo"})
		if !errors.Is(err, errRestore) || w.restores != 1 || w.takenKept != 1 {
			t.Fatalf("err %v after %d restores, %d kept VMs asked; want the fallback's restore", err, w.restores, w.takenKept)
		}
		if w.restoreNote == nil || !strings.Contains(w.restoreNote.Fallback, "failed its renewal: secret gone") {
			t.Errorf("the fallback's context says %+v, want why the clone was not used", w.restoreNote)
		}
		wantStopped(t, w, "failed its renewal: secret gone")
		if w.missed != 1 || strings.Join(w.outcomes, ",") != "failed" {
			t.Errorf("ticket missed %d times, outcomes %v; want one miss, failed", w.missed, w.outcomes)
		}
	})
	t.Run("after the event", func(t *testing.T) {
		w := newWorld(t)
		lines := make(chan string, 4)
		w.lv = liveVM(t, "vm-000000000001", func(l guestLine, reply func(string)) bool {
			lines <- l.text
			if strings.Contains(l.text, `"ping"`) {
				reply(`{"ok":true,"op":"pong","agent":"thaw-agent/6"}`)
				return false
			}
			return true // the renewal and the event arrived: the guest hangs up unanswered
		})
		if _, err := w.lv.Agent.Ping(context.Background()); err != nil { // the connection learns protocol 6
			t.Fatal(err)
		}
		<-lines
		w.clone = true
		w.renewal = func() (agent.Renewal, error) { return agent.Renewal{Entropy: bytes.Repeat([]byte{1}, 32)}, nil }
		_, err := w.invoker().InvokeCold(context.Background(), ColdRequest{InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"n":1}`)}, Function: "echo"})
		if !errors.Is(err, errdefs.ErrVMFailed) || !strings.Contains(err.Error(), "so it was not run again") {
			t.Fatalf("error %v, want ErrVMFailed saying the event was not run again", err)
		}
		if l := <-lines; !strings.HasPrefix(l, "restore ") || !strings.Contains(l, ` invoke {`) || !strings.Contains(l, `"event":{"n":1}`) {
			t.Errorf("the clone got %q, want its renewal and the event on one line", l)
		}
		if w.restores != 0 || w.takenKept != 0 || w.missed != 0 {
			t.Errorf("%d restores, %d kept VMs asked, %d misses after the event was sent: want none", w.restores, w.takenKept, w.missed)
		}
		wantStopped(t, w, "the event went with the renewal")
		if strings.Join(w.outcomes, ",") != "failed" {
			t.Errorf("outcomes %v, want failed", w.outcomes)
		}
	})
}

// wantStopped checks that the world's VM was stopped once, failed, for why.
func wantStopped(t *testing.T, w *world, why string) {
	t.Helper()
	if len(w.stops) != 1 || !strings.HasPrefix(w.stops[0], catalog.StateFailed+": ") || !strings.Contains(w.stops[0], why) {
		t.Errorf("stops %q, want one failed saying %q", w.stops, why)
	}
}

// An invocation its guest does not complete (a timeout, a VMM that
// exits) answers an error and is recorded as failed; the VM is stopped.
func TestFailedInvocationIsRecorded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exit    bool // the VMM exits on the event, rather than never answering
		timeout time.Duration
		kind    error
		want    []string
	}{
		{"timeout", false, 100 * time.Millisecond, errdefs.ErrTimeout,
			[]string{"timed out after 100ms", "thawd --invoke-timeout (7s on this daemon)", "the VM was killed"}},
		{"vmm exits", true, time.Minute, errdefs.ErrVMFailed,
			[]string{"vm process exited during the invocation: guest ran out of memory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.lv = liveVM(t, "vm-000000000002", func(guestLine, func(string)) bool { return tc.exit })
			_, err := w.invoker().InvokeVM(context.Background(), w.lv.ID, InvokeRequest{Event: json.RawMessage(`{}`), Timeout: tc.timeout})
			if !errors.Is(err, tc.kind) {
				t.Fatalf("error %v, want %v", err, tc.kind)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if len(w.failed) != 1 || w.failed[0].VM != w.lv.ID || w.failed[0].Mode != "warm" || w.failed[0].Function != "echo" ||
				!errors.Is(w.failedErrs[0], tc.kind) || len(w.recorded) != 0 {
				t.Errorf("recorded failed %+v (%v), completed %d; want the warm invocation, failed", w.failed, w.failedErrs, len(w.recorded))
			}
			wantStopped(t, w, tc.want[0])
			if w.lv.Running.Load() != nil {
				t.Error("the VM still lists the invocation as running")
			}
		})
	}
}

// An invocation whose VM a delete killed answers a conflict that says so,
// and is recorded failed (VMDeleted); the delete, not the invocation,
// stops the VM.
func TestKilledByDelete(t *testing.T) {
	w := newWorld(t)
	w.lv = liveVM(t, "vm-000000000003", func(guestLine, func(string)) bool {
		why := "deleted with force"
		w.lv.KilledBy.Store(&why)
		return true
	})
	_, err := w.invoker().InvokeVM(context.Background(), w.lv.ID, InvokeRequest{})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "deleted with force") {
		t.Fatalf("error %v, want a conflict saying the VM was deleted", err)
	}
	if len(w.recorded) != 1 || w.recorded[0].OK || w.recorded[0].Error == nil || w.recorded[0].Error.Type != VMDeletedError || len(w.stops) != 0 {
		t.Errorf("recorded %+v, stops %q; want the invocation failed as VMDeleted and no stop", w.recorded, w.stops)
	}
}
