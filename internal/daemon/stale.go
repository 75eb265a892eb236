package daemon

import (
	"context"
	"encoding/json"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/wire"
)

// Stale versions are the versions component's (package daemon/versions:
// it compares each version's build inputs with what the daemon runs now and
// rebuilds the stale ones as operations). Until its rebuild is done, each
// cold start of a stale version says so in timing.build: served from its
// older snapshot if that still restores, else booted for the request
// (invokeBooted, here, on the daemon's VMs).

// staleNote is why a version is stale, "" if it is not.
func (s *Service) staleNote(function string, number int) string {
	return s.versions.StaleNote(function, number)
}

// checkVersions finds the stale versions and rebuilds them in the
// background (versions.Manager.CheckVersions).
func (s *Service) checkVersions(ctx context.Context) error { return s.versions.CheckVersions(ctx) }

// invokeBooted serves a cold invocation of a stale version whose older
// snapshot no longer restores: the version boots for the request, runs it
// and is torn down.
func (s *Service) invokeBooted(ctx context.Context, function string, target Target, event json.RawMessage, timeout time.Duration,
	start time.Time, why string) (*Invocation, error) {
	v, err := s.GetVersion(ctx, function, target.Version)
	if err != nil {
		return nil, err
	}
	t := time.Now()
	vm, err := s.vms.Boot(ctx, &v.Config, v.Number)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := s.DeleteVM(context.WithoutCancel(ctx), vm.ID); err != nil {
			s.log.Warn("delete the vm booted for a stale version", "vm", vm.ID, "err", err)
		}
	}()
	lv, err := s.vms.Lock(ctx, vm.ID, catalog.StateRunning)
	if err != nil {
		return nil, err
	}
	defer lv.Mu.Unlock()
	inv := &Invocation{ID: newID("inv-"), Function: function, VM: vm.ID, Mode: "cold", Version: v.Number, Alias: target.Alias}
	inv.Timing.Build = &wire.BuildNote{Stale: why, Served: "boot", BootMS: ms(time.Since(t))}
	if err := s.invokeLocked(ctx, lv, inv, event, timeout); err != nil {
		return nil, s.invokeFailed(ctx, inv, start, err)
	}
	inv.Timing.TotalMS = ms(time.Since(start))
	s.record(ctx, inv)
	s.log.Info("cold invocation of a stale version, booted", "invocation", inv.ID, "function", function, "version", v.Number,
		"why", why, "total_ms", inv.Timing.TotalMS)
	return inv, nil
}
