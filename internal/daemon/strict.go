package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/restore"
)

// Strict restores: a cold invocation that asks for strict (the API's
// "strict", thaw invoke --strict) refuses to run as vanilla when its
// strategy cannot restore the snapshot; it fails with a conflict (409)
// that says why, instead of answering from a fallback.

// strictly makes o a strict restore: the strategy's session may not fall
// back, and no standby VM whose session fell back serves it.
func strictly(o restoreOpts) restoreOpts {
	begin := o.begin
	o.begin = func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
		env.Strict = true
		return begin(ctx, snap, env)
	}
	o.strict = true
	return o
}

// takeStandbyFor is takeStandby for a restore: a strict one does not take
// a standby VM whose strategy fell back when it was started ahead (that VM
// is stopped, and the restore starts a VMM of its own).
func (s *Service) takeStandbyFor(key poolKey, strict bool) *standby {
	sb := s.vmmPool.Take(key)
	if sb == nil || !strict || sb.Plan.sess.Stats().Fallback == "" {
		return sb
	}
	s.retire(context.Background(), sb.VM, sb.Rec, "a strict restore does not take a standby vm that fell back")
	return nil
}

// refusedFallback turns a strict restore's refusal into a conflict that
// says what to do; other errors pass unchanged.
func refusedFallback(err error) error {
	var fe *restore.FallbackRefusedError
	if !errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("%w: strict: %v (without strict the invocation would run as vanilla)", ErrConflict, fe)
}
