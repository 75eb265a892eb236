package regsync

import (
	"context"
	"errors"
	"testing"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// Without a registry every operation is a conflict before it starts; with
// one, each names its target and refuses what it would refuse.
func TestOperationTargets(t *testing.T) {
	ctx := context.Background()
	none := newNode(t, "")
	if _, err := none.PushTarget(ctx, snapID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("push without a registry: %v", err)
	}
	if _, err := none.PullTarget(wire.PullRequest{Function: "hello"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("pull without a registry: %v", err)
	}
	if _, err := none.GCTarget(wire.GCRequest{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("collection without a registry: %v", err)
	}

	_, a, sn, _ := pair(t)
	if got, err := a.PushTarget(ctx, sn.ID); err != nil || got != sn.ID {
		t.Errorf("push target %q, %v", got, err)
	}
	if _, err := a.PushTarget(ctx, "snap-ffffffffffff"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("push of a snapshot not here: %v, want ErrNotFound", err)
	}
	for req, want := range map[wire.PullRequest]string{{Function: "hello"}: "hello", {Snapshot: snapID}: snapID} {
		if got, err := a.PullTarget(req); err != nil || got != want {
			t.Errorf("pull target of %+v: %q, %v", req, got, err)
		}
	}
	if _, err := a.PullTarget(wire.PullRequest{Function: "hello", Snapshot: snapID}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("pull naming both: %v, want ErrInvalid", err)
	}
	neg := -1
	if _, err := a.GCTarget(wire.GCRequest{GraceS: &neg}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("negative grace: %v, want ErrInvalid", err)
	}
	if got, err := a.GCTarget(wire.GCRequest{}); err != nil || got != a.Registry().Config().Location() || got == "" {
		t.Errorf("collection target %q, %v", got, err)
	}
}
