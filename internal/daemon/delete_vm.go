package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/wire"
)

// Deleting a VM: a delete waits for what holds the VM (an invocation, a
// snapshot, a boot) and refuses new work on it meanwhile; a forced delete
// kills the VMM at once, and an invocation running on it fails with an
// error naming the delete, recorded in the history.

// Why a delete killed a VM that was in use (the invocation's error and the
// VM's reason say it).
const (
	whyForced  = "deleted with force (thaw vm delete --force)"
	whyCascade = "deleted with its function (thaw function delete --cascade)"
)

// runningInvocation is the invocation a VM is serving.
type runningInvocation struct {
	ID      string
	Started time.Time
	Timeout time.Duration
}

// DeleteVM stops a VM once what runs on it has finished (no new
// invocation starts on it meanwhile), frees everything it held and forgets
// it.
func (s *Service) DeleteVM(ctx context.Context, id string) error { return s.deleteVM(ctx, id, "") }

// DeleteVMForce deletes a VM without waiting: its VMM is killed at once,
// and an invocation running on it fails, saying the VM was deleted.
func (s *Service) DeleteVMForce(ctx context.Context, id string) error {
	return s.deleteVM(ctx, id, whyForced)
}

// deleteVM is DeleteVM's work; kill, if set, is why the VMM is killed at
// once when the VM is in use.
func (s *Service) deleteVM(ctx context.Context, id, kill string) error {
	v, err := s.GetVM(ctx, id)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx) // once begun, the delete ends even if its caller went away
	if _, ok := s.live(id); !ok && v.Live() {
		s.awaitStart(ctx, id)
	}
	return s.endVM(ctx, id, v.RunDir, kill)
}

// awaitStart waits, up to the boot timeout, while VM id is recorded live
// without a VMM here yet (its start is under way): deleted before it is
// live, the start would record it again.
func (s *Service) awaitStart(ctx context.Context, id string) {
	for deadline := time.Now().Add(s.cfg.BootTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := s.live(id); ok {
			return
		}
		if v, err := s.db.GetVM(ctx, id); err != nil || !v.Live() {
			return
		}
	}
}

// endVM stops VM id if it has a VMM (kill: at once), removes its run
// directory and forgets it.
func (s *Service) endVM(ctx context.Context, id, runDir, kill string) error {
	s.forgetPooled(id)
	if lv, ok := s.live(id); ok {
		s.stopForDelete(ctx, lv, kill)
	}
	_ = os.RemoveAll(runDir)
	if err := s.db.DeleteVM(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
		return err // not found: whatever ended the VM meanwhile forgot it
	}
	return nil
}

// stopForDelete stops a live VM under its lock: it waits for the lock's
// holder, or with kill set kills the VMM first if the VM is in use, so
// the holder's work fails (and says why: killedBy).
func (s *Service) stopForDelete(ctx context.Context, lv *liveVM, kill string) {
	lv.Deleting.Store(true)
	reason := "deleted"
	switch {
	case kill == "":
		lv.Mu.Lock()
	case lv.Mu.TryLock():
	default:
		lv.KilledBy.Store(&kill)
		reason = kill
		if err := lv.M.Kill(); err != nil {
			s.log.Warn("kill vm for a delete", "vm", lv.ID, "err", err)
		}
		lv.Mu.Lock() // the holder's work fails with its VMM gone
	}
	s.stopVM(ctx, lv, catalog.StateStopped, reason)
	lv.Mu.Unlock()
}

// killedDuring is the error of an invocation whose VMM a delete killed,
// nil if none did. The invocation is recorded in the history, failed,
// with the reason.
func (s *Service) killedDuring(ctx context.Context, lv *liveVM, inv *Invocation) error {
	why := lv.KilledBy.Load()
	if why == nil {
		return nil
	}
	reason := fmt.Sprintf("%s %s into the invocation, which did not finish", *why,
		(time.Duration(inv.Timing.InvokeMS*1e3) * time.Microsecond).Round(time.Millisecond))
	inv.OK, inv.Result = false, nil
	inv.Error = &wire.FunctionError{Type: VMDeletedError, Message: "vm " + lv.ID + " " + reason}
	inv.Timing.TotalMS = inv.Timing.InvokeMS
	if inv.Mode != "record" { // a prepare's record runs are not the history's
		s.record(ctx, inv)
	}
	s.log.Info("invocation ended by a delete", "invocation", inv.ID, "vm", lv.ID, "function", inv.Function, "reason", reason)
	return fmt.Errorf("%w: vm %s: %s", ErrConflict, lv.ID, reason)
}

// VMDeletedError is the error type the invocation history records for an
// invocation whose VM was deleted while it ran.
const VMDeletedError = "VMDeleted"

// RunningInvocation is the invocation VM id is serving now, nil if none.
func (s *Service) RunningInvocation(id string) *wire.RunningInvocation {
	lv, ok := s.live(id)
	if !ok {
		return nil
	}
	r := lv.Running.Load()
	if r == nil {
		return nil
	}
	return &wire.RunningInvocation{ID: r.ID, StartedAt: r.Started, RunningMS: ms(time.Since(r.Started)),
		TimeoutMS: ms(r.Timeout)}
}
