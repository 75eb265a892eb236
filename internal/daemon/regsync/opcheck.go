package regsync

import (
	"context"

	"github.com/thaw-dev/thaw/wire"
)

// The checks a push, pull or collection passes before it starts as an
// operation; each returns the operation's target.

// PushTarget checks a push of snapshot id (a registry, the snapshot here)
// and returns its target, the snapshot.
func (s *Sync) PushTarget(ctx context.Context, id string) (string, error) {
	if err := s.NeedRegistry(); err != nil {
		return "", err
	}
	if _, err := s.d.Snapshots().Get(ctx, id); err != nil {
		return "", err
	}
	return id, nil
}

// PullTarget checks a pull request (CheckPull) and returns its target, the
// snapshot or function it names.
func (s *Sync) PullTarget(req wire.PullRequest) (string, error) {
	if err := s.CheckPull(req); err != nil {
		return "", err
	}
	if req.Snapshot != "" {
		return req.Snapshot, nil
	}
	return req.Function, nil
}

// GCTarget checks a collection request (CheckGC) and returns its target,
// the registry's location.
func (s *Sync) GCTarget(req wire.GCRequest) (string, error) {
	if err := s.NeedRegistry(); err != nil {
		return "", err
	}
	if _, err := CheckGC(req); err != nil {
		return "", err
	}
	return s.registry.Config().Location(), nil
}
