package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// waitPhase waits until operation id reaches phase; it fails t if the
// operation ends first.
func waitPhase(t *testing.T, s *Service, id, phase string) {
	t.Helper()
	waitFor(t, 10*time.Second, "operation "+id+" to reach phase "+phase, func() bool {
		op, err := s.Operation(context.Background(), id)
		if err != nil || op.State != wire.OpRunning && op.Progress.Phase != phase {
			t.Fatalf("operation %s never reached phase %q: %+v (%v)", id, phase, op, err)
		}
		return op.Progress.Phase == phase
	})
}

// A boot started as an operation outlives the request that started it,
// reports its phases and ends with the VM the synchronous boot answers.
func TestOperationBoot(t *testing.T) {
	s, b := fakeService(t, nil)
	createFn(t, s, "echo")
	release := b.HoldReady()
	ctx, cancel := context.WithCancel(WithRequestID(context.Background(), "req-1"))
	op, err := s.StartBoot(ctx, "echo")
	cancel() // the request is gone
	if err != nil {
		t.Fatal(err)
	}
	if op.Kind != wire.OpBoot || op.Target != "echo" || op.State != wire.OpRunning || op.RequestID != "req-1" {
		t.Fatalf("started %+v", op)
	}
	waitPhase(t, s, op.ID, "booting")
	release()
	done, err := s.WaitOperation(context.Background(), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != wire.OpSucceeded || done.Err != nil || done.Result == nil || done.Result.VM == nil || done.Progress.Phase != "done" {
		t.Fatalf("finished %+v (%v)", done, done.Err)
	}
	v, err := s.GetVM(context.Background(), done.Result.VM.ID)
	if err != nil || v.State != "running" || v.BootMS != done.Result.VM.BootMS || done.Result.VM.State != "running" {
		t.Errorf("the booted VM: %+v (%v), the operation says %+v", v, err, done.Result.VM)
	}
	// An unknown function is answered at once (the registry's own answers
	// to ids, listing and deletes are package ops's tests).
	if _, err := s.StartBoot(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("boot of an unknown function: %v", err)
	}
	if list, _ := s.ListOperations(context.Background()); len(list) != 1 || list[0].ID != op.ID {
		t.Errorf("list %+v", list)
	}
}

// A boot whose VMM does not start fails with the error the synchronous
// boot returns.
func TestOperationBootFails(t *testing.T) {
	s, b := fakeService(t, nil)
	createFn(t, s, "echo")
	b.SetStart(func(vmm.Spec) error { return errors.New("no such device") })
	_, syncErr := s.BootVM(context.Background(), "echo")
	op, err := s.StartBoot(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	done, err := s.WaitOperation(context.Background(), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != wire.OpFailed || done.Result != nil || !errors.Is(done.Err, ErrVMFailed) || !errors.Is(syncErr, ErrVMFailed) ||
		!strings.Contains(done.Err.Error(), "no such device") {
		t.Fatalf("finished %+v: %v (the synchronous boot: %v)", done, done.Err, syncErr)
	}
	if err := s.DeleteOperation(context.Background(), op.ID); err != nil {
		t.Errorf("forget a failed operation: %v", err)
	}
}

// Closing the daemon fails running operations at once, stops their work,
// and refuses new ones.
func TestOperationsFailOnClose(t *testing.T) {
	s, b := fakeService(t, nil)
	createFn(t, s, "echo")
	release := b.HoldReady()
	defer release()
	op, err := s.StartBoot(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	waitPhase(t, s, op.ID, "booting")
	if err := s.DeleteOperation(context.Background(), op.ID); !errors.Is(err, ErrConflict) {
		t.Errorf("delete a running operation: %v", err)
	}
	closed := make(chan error)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return: the operation's work did not stop")
	}
	done, err := s.Operation(context.Background(), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != wire.OpFailed || !errors.Is(done.Err, ErrConflict) || !strings.Contains(done.Err.Error(), "shut down") {
		t.Fatalf("after close: %+v (%v)", done, done.Err)
	}
	if _, err := s.StartBoot(context.Background(), "echo"); err == nil {
		t.Error("an operation started after close")
	}
}

// Prepare reports its record steps, one of how many, in order.
func TestOperationPrepareProgress(t *testing.T) {
	_, strategies := testStrategies(nil)
	s, _ := fakeService(t, func(c *Config) { c.Strategies = strategies })
	createFn(t, s, "echo")
	var mu sync.Mutex
	var seen []string
	ctx := WithProgress(context.Background(), func(p wire.OperationProgress) {
		mu.Lock()
		defer mu.Unlock()
		s := p.Phase
		if p.Total > 0 {
			s += fmt.Sprintf(" %d/%d %s", p.Done, p.Total, p.Unit)
		}
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
	})
	if _, err := s.Prepare(ctx, PrepareRequest{Function: "echo", RecordEvent: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	want := []string{"boot: admission", "boot: starting vmm", "boot: booting", "boot: agent ready", "clean snapshot",
		"record " + string(restore.FaaSnap) + " 0/2 strategies", "record " + string(restore.REAP) + " 1/2 strategies", "publishing 2/2 strategies"}
	if !slices.Equal(seen, want) {
		t.Errorf("progress %q, want %q", seen, want)
	}
}

// A copy started as an operation reports the memory file's bytes and ends
// with the snapshot the catalog has.
func TestOperationCopy(t *testing.T) {
	s, _ := fakeService(t, nil)
	_, sn := bootAndSnapshot(t, s, "echo")
	op, err := s.StartCopy(context.Background(), sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	done, err := s.WaitOperation(context.Background(), op.ID)
	if err != nil || done.State != wire.OpSucceeded || done.Result.Snapshot == nil {
		t.Fatalf("%+v %v", done, err)
	}
	got, err := s.GetSnapshot(context.Background(), done.Result.Snapshot.ID)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(SnapshotBody(got))
	b, _ := json.Marshal(done.Result.Snapshot)
	if string(a) != string(b) {
		t.Errorf("operation's snapshot %s, catalog's %s", b, a)
	}
	if _, err := s.StartCopy(context.Background(), "snap-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("copy of an unknown snapshot: %v", err)
	}
}
