package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/registry"
)

// DefaultRegistryRefresh is how often a node with a registry compares its
// functions with the registry's records.
const DefaultRegistryRefresh = time.Minute

// fnGate is held shared by every cold start that names a function rather
// than a snapshot, and exclusively while an outdated copy of the function
// is removed, so a cold start never picks a snapshot that is going.
func (s *Service) fnGate(name string) *sync.RWMutex { return keyedLock(s, s.fnGates, name) }

// every runs fn every interval until Close, the first time after a random
// tenth of it (so nodes started together spread their runs); Close
// cancels fn's context.
func (s *Service) every(interval time.Duration, fn func(context.Context)) {
	defer s.wg.Done()
	wait := time.Duration(rand.Int64N(int64(interval)/10 + 1))
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(wait):
		}
		wait = interval
		ctx, cancel := context.WithCancel(context.Background())
		stop := make(chan struct{})
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-stop:
			}
		}()
		fn(ctx)
		close(stop)
		cancel()
	}
}

// refreshScheduled is one scheduled RefreshFunctions (every
// --registry-refresh).
func (s *Service) refreshScheduled(ctx context.Context) {
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
func (s *Service) RefreshFunctions(ctx context.Context) ([]string, error) {
	if err := s.needRegistry(); err != nil {
		return nil, err
	}
	fns, err := s.db.ListFunctions(ctx)
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
			return replaced, registryErr(err)
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
func (s *Service) removeOutdated(ctx context.Context, fn *catalog.Function) error {
	g := s.fnGate(fn.Name)
	if !g.TryLock() {
		return fmt.Errorf("%w: a cold start of %s is under way", ErrConflict, fn.Name)
	}
	defer g.Unlock()
	snaps, err := s.db.ListSnapshots(ctx, fn.Name)
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Pinned {
			return fmt.Errorf("%w: snapshot %s of %s is pinned", ErrConflict, sn.ID, fn.Name)
		}
	}
	s.pool.EvictWhere(func(k *kept) bool { return k.Fn.Name == fn.Name }, "function outdated")
	s.vmmPool.DropWhere(func(sb *standby) bool { return sb.VM.fn.Name == fn.Name }, whyStandbyGone)
	if v, err := s.liveVMWhere(ctx, func(v *catalog.VM) bool { return v.Function == fn.Name }); err != nil || v != nil {
		if err == nil {
			err = fmt.Errorf("%w: vm %s (%s) runs it", ErrConflict, v.ID, v.State)
		}
		return err
	}
	for _, sn := range snaps {
		if err := s.DeleteSnapshot(ctx, sn.ID); err != nil {
			return err
		}
	}
	return s.forgetFunction(ctx, fn.Name)
}

func short(digest string) string { return digest[:min(12, len(digest))] }
