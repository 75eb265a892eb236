package invoke

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/versions"
)

// coldTarget resolves the snapshot and strategy of a cold start: the
// newest snapshot of the version ref resolves to unless the request names
// one (imported from the registry when the node has none; imported is how
// long that took).
func (v *Invoker) coldTarget(ctx context.Context, req ColdRequest, ref versions.Ref) (sn *catalog.Snapshot, strategy restore.Strategy, imported time.Duration, target Target, err error) {
	fail := func(err error) (*catalog.Snapshot, restore.Strategy, time.Duration, Target, error) {
		return nil, restore.Strategy{}, 0, Target{}, err
	}
	if strategy, err = v.d.Restore.Strategy(req.Strategy); err != nil {
		return fail(err)
	}
	if req.Snapshot != "" && ref.Qualified() {
		return fail(fmt.Errorf("%w: name a snapshot or a version or alias, not both", errdefs.ErrInvalid))
	}
	snapID := req.Snapshot
	// Unless the request names one, a snapshot whose memory is in the
	// registry (imported now, or pulled lazily before) restores with the
	// remote strategy.
	remote, err := v.d.Restore.Strategy(v.cfg.RemoteStrategy)
	if err != nil {
		return fail(err)
	}
	if snapID == "" {
		var notHere error
		if target, notHere = v.d.Cold.Resolve(ctx, ref); notHere != nil {
			if ref.Version == 0 || !errors.Is(notHere, errdefs.ErrNotFound) {
				return fail(notHere)
			}
			target = Target{Version: ref.Version} // a version not here: perhaps in the registry
		} else {
			snapID, notHere = v.d.Cold.NewestSnapshotOf(ctx, req.Function, target.Version)
		}
		if notHere != nil {
			if vs, _ := v.d.Catalog.ListVersions(ctx, req.Function); target.Version == 0 && len(vs) > 0 {
				return fail(notHere) // no live alias here: which version is meant is this node's call
			}
			t := time.Now()
			if req.Strategy == "" {
				strategy = remote
			}
			if snapID, err = v.d.Cold.Import(ctx, req.Function, target.Version, strategy.Kind, notHere); err != nil {
				return fail(err)
			}
			imported = time.Since(t)
		}
	}
	if sn, err = v.d.Cold.GetSnapshot(ctx, snapID); err != nil {
		return fail(err)
	}
	if req.Strategy == "" && strategy.Kind != remote.Kind && sn.RemoteMemory {
		strategy = remote
	}
	if req.Snapshot != "" && req.Function != "" && sn.Function != req.Function {
		return fail(fmt.Errorf("%w: snapshot %s belongs to function %q, not %q", errdefs.ErrInvalid, snapID, sn.Function, req.Function))
	}
	return sn, strategy, imported, target, nil
}
