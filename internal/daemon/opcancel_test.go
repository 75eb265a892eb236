package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/wire"
)

// A running operation is canceled: its work stops, it fails with a
// cancellation naming the request, and the boot it ran leaves no live VM;
// an operation that has ended cannot be canceled.
func TestCancelOperation(t *testing.T) {
	s, b := fakeService(t, nil)
	createFn(t, s, "echo")
	release := b.HoldReady()
	defer release()
	op, err := s.StartBoot(WithRequestID(context.Background(), "req-start"), "echo")
	if err != nil {
		t.Fatal(err)
	}
	waitPhase(t, s, op.ID, "booting")
	got, err := s.CancelOperation(WithRequestID(context.Background(), "req-cancel"), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != wire.OpFailed || !errors.Is(got.Err, context.Canceled) ||
		!strings.Contains(got.Err.Error(), "operation canceled (request req-cancel)") {
		t.Fatalf("canceled operation: %s, %v", got.State, got.Err)
	}
	vms, _ := s.ListVMs(context.Background())
	for _, v := range vms {
		if v.Live() {
			t.Errorf("a canceled boot left vm %s %s", v.ID, v.State)
		}
	}
	if _, err := s.CancelOperation(context.Background(), op.ID); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "already failed") {
		t.Errorf("second cancel: %v", err)
	}
	release()
	done, err := s.StartBoot(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitOperation(context.Background(), done.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelOperation(context.Background(), done.ID); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "already succeeded") {
		t.Errorf("cancel of a finished operation: %v", err)
	}
	if _, err := s.CancelOperation(context.Background(), "op-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel of an unknown operation: %v", err)
	}
}
