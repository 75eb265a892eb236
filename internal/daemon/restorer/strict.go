package restorer

import (
	"context"
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
)

// Strict restores: a cold invocation that asks for strict (the API's
// "strict", thaw invoke --strict) refuses to run as vanilla when its
// strategy cannot restore the snapshot; it fails with a conflict (409)
// that says why, instead of answering from a fallback.

// Strict makes o a strict restore: the strategy's session may not fall
// back, and no standby VM whose session fell back serves it.
func Strict(o Opts) Opts {
	begin := o.Begin
	o.Begin = func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
		env.Strict = true
		return begin(ctx, snap, env)
	}
	o.Strict = true
	return o
}

// takeStandby takes a standby VM for a restore: a strict one does not take
// a standby VM whose strategy fell back when it was started ahead (that VM
// is stopped, and the restore starts a VMM of its own).
func (r *Restorer[V]) takeStandby(snapshot string, kind restore.Kind, strict bool) (V, *catalog.VM, *Plan, bool) {
	vm, rec, c, ok := r.d.Pool.Take(snapshot, kind)
	if !ok || !strict || c.sess.Stats().Fallback == "" {
		return vm, rec, c, ok
	}
	r.d.Pool.Retire(context.Background(), vm, rec, "a strict restore does not take a standby vm that fell back")
	var none V
	return none, nil, nil, false
}

// RefusedFallback turns a strict restore's refusal into a conflict that
// says what to do; other errors pass unchanged.
func RefusedFallback(err error) error {
	var fe *restore.FallbackRefusedError
	if !errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("%w: strict: %v (without strict the invocation would run as vanilla)", errdefs.ErrConflict, fe)
}
