package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/versions"
)

// collectVersions applies version retention to a function: the snapshots
// of versions that are neither among its newest VersionKeep nor routed to
// by an alias are deleted, here and in the registry, and the version is
// marked collected (its record stays, as history). A snapshot that is
// pinned or in use stays, and its version with it, until a later run.
func (s *Service) collectVersions(ctx context.Context, function string) {
	vs, err := s.db.ListVersions(ctx, function)
	if err != nil || len(vs) <= s.versionKeep() {
		return
	}
	aliases, err := s.db.ListAliases(ctx, function)
	if err != nil {
		return
	}
	var aliased, live []int
	for _, a := range aliases {
		if r, err := aliasRouting(a); err == nil {
			aliased = append(aliased, r.Versions()...)
		}
	}
	for _, v := range vs {
		if !v.Collected {
			live = append(live, v.Number)
		}
	}
	_, collect := versions.Retained(live, s.versionKeep(), aliased)
	if len(collect) == 0 {
		return
	}
	snaps, err := s.db.ListSnapshots(ctx, function)
	if err != nil {
		return
	}
	for _, n := range collect {
		if s.collectVersion(ctx, function, n, snaps) {
			s.metrics.VersionCollected()
		}
	}
	s.removeUnusedCode(ctx, function)
}

// collectVersion deletes version n's snapshots and marks it collected;
// false if one of them had to stay.
func (s *Service) collectVersion(ctx context.Context, function string, n int, snaps []*catalog.Snapshot) bool {
	for _, sn := range snaps {
		if sn.Version != n {
			continue
		}
		if sn.Pinned {
			return false
		}
		if err := s.DeleteSnapshot(ctx, sn.ID); err != nil {
			s.log.Warn("version retention: snapshot stays for now", "function", function, "version", n, "snapshot", sn.ID, "err", err)
			return false
		}
		if s.reg.Registry() != nil {
			if err := s.reg.Registry().DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, registry.ErrNotFound) {
				s.log.Warn("version retention: registry copy stays", "function", function, "version", n, "snapshot", sn.ID, "err", err)
			}
		}
	}
	if s.reg.Registry() != nil {
		if err := s.reg.Registry().DeleteVersion(ctx, function, n); err != nil {
			s.log.Warn("version retention: registry record stays", "function", function, "version", n, "err", err)
		}
	}
	if err := s.db.SetVersionCollected(ctx, function, n, true); err != nil {
		s.log.Error("version retention", "function", function, "version", n, "err", err)
		return false
	}
	s.log.Info("version collected", "function", function, "version", n, "keep", s.versionKeep())
	return true
}

// removeUnusedCode deletes the code directories of function's collected
// versions that neither the function nor a version still in use points to.
func (s *Service) removeUnusedCode(ctx context.Context, function string) {
	used, err := s.codeDirsInUse(ctx)
	if err != nil {
		return
	}
	vs, err := s.db.ListVersions(ctx, function)
	if err != nil {
		return
	}
	for _, v := range vs {
		if dir := filepath.Dir(v.Config.CodeDir); v.Collected && !used[dir] {
			if err := os.RemoveAll(dir); err != nil {
				s.log.Warn("remove a collected version's code", "function", function, "version", v.Number, "err", err)
			}
		}
	}
}

// codeDirsInUse are the function directories (functions/<name>-<id>) the
// functions and their versions that are not collected point to.
func (s *Service) codeDirsInUse(ctx context.Context) (map[string]bool, error) {
	fns, err := s.db.ListFunctions(ctx)
	if err != nil {
		return nil, err
	}
	vs, err := s.db.ListVersions(ctx, "")
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, f := range fns {
		used[filepath.Dir(f.CodeDir)] = true
	}
	for _, v := range vs {
		if !v.Collected {
			used[filepath.Dir(v.Config.CodeDir)] = true
		}
	}
	s.vers.mu.Lock()
	for _, fn := range s.vers.pending {
		used[filepath.Dir(fn.CodeDir)] = true
	}
	s.vers.mu.Unlock()
	return used, nil
}

// removePendingSnapshots deletes the snapshots of deploys that never
// published their version (a crash in the middle of a deploy).
func (s *Service) removePendingSnapshots(ctx context.Context) error {
	snaps, err := s.db.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Version >= 0 {
			continue
		}
		if err := s.db.DeleteSnapshot(ctx, sn.ID); err != nil {
			return err
		}
		if err := os.RemoveAll(sn.Dir); err != nil {
			return err
		}
		s.log.Warn("removed the snapshot of an unfinished deploy", "function", sn.Function, "snapshot", sn.ID)
	}
	return nil
}
