package regsync

import (
	"context"
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
)

// RefreshScheduled is one scheduled RefreshFunctions (every
// --registry-refresh).
func (s *Sync) RefreshScheduled(ctx context.Context) {
	if _, err := s.RefreshFunctions(ctx); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Warn("functions not compared with the registry", "err", err)
	}
}

// RefreshFunctions replaces the functions here that were published again
// elsewhere: those whose registry record names other code, with a newest
// snapshot taken after the function was created here. The copy here (its
// kept and standby VMs, its snapshots, the function) goes, and the next
// invocation imports the registry's version. A copy with a live VM, a
// pinned snapshot or a cold start under way stays until a later round.
// It returns the functions replaced; a registry it cannot read changes
// nothing.
func (s *Sync) RefreshFunctions(ctx context.Context) ([]string, error) {
	if err := s.NeedRegistry(); err != nil {
		return nil, err
	}
	fns, err := s.d.Catalog.ListFunctions(ctx)
	if err != nil {
		return nil, err
	}
	var replaced []string
	for _, fn := range fns {
		rec, err := s.registry.GetFunction(ctx, fn.Name)
		if errors.Is(err, registry.ErrNotFound) {
			continue // never published: this node's own
		}
		if errors.Is(err, registry.ErrUntrusted) {
			continue // refused and reported (recordRefused): the copy here stays
		}
		if err != nil {
			return replaced, Err(err)
		}
		if rec.Digest == fn.Digest || !rec.LatestCreatedAt.After(fn.CreatedAt) {
			continue
		}
		if err := s.removeOutdated(ctx, fn); err != nil {
			s.log.Info("outdated function kept for now", "function", fn.Name, "digest", short(fn.Digest),
				"registry_digest", short(rec.Digest), "why", err)
			continue
		}
		s.log.Info("outdated function removed: its next invocation imports the registry's version", "function", fn.Name,
			"digest", short(fn.Digest), "registry_digest", short(rec.Digest), "registry_snapshot", rec.Latest)
		replaced = append(replaced, fn.Name)
	}
	return replaced, nil
}

// removeOutdated removes the copy of fn here, unless something uses it.
func (s *Sync) removeOutdated(ctx context.Context, fn *catalog.Function) error {
	g := s.Gate(fn.Name)
	if !g.TryLock() {
		return fmt.Errorf("%w: a cold start of %s is under way", errdefs.ErrConflict, fn.Name)
	}
	defer g.Unlock()
	snaps, err := s.d.Catalog.ListSnapshots(ctx, fn.Name)
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Pinned {
			return fmt.Errorf("%w: snapshot %s of %s is pinned", errdefs.ErrConflict, sn.ID, fn.Name)
		}
	}
	s.d.ReleaseOutdated(fn.Name)
	if v, err := s.d.Running(ctx, fn.Name); err != nil || v != nil {
		if err == nil {
			err = fmt.Errorf("%w: vm %s (%s) runs it", errdefs.ErrConflict, v.ID, v.State)
		}
		return err
	}
	for _, sn := range snaps {
		if err := s.d.Snapshots().Delete(ctx, sn.ID); err != nil {
			return err
		}
	}
	return s.d.Forget(ctx, fn.Name)
}

func short(digest string) string { return digest[:min(12, len(digest))] }
