package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
	"github.com/thaw-dev/thaw/wire"
)

// Stale versions: a version's snapshot records what it was made from
// (buildInputs). When the daemon's guest image, kernel or machine changes,
// the version is stale: a rebuild (an operation) boots it again, snapshots
// it (or prepares it, if it was deployed prepared) and replaces its
// snapshots, one version at a time, in the background. Until then each
// cold start of it says so in timing.build: served from its older
// snapshot if that still restores, else booted for the request.

func versionKey(function string, number int) string { return fmt.Sprintf("%s:%d", function, number) }

// staleReasons says what differs between what a version was built from
// and what the daemon runs now ("" when nothing).
func staleReasons(was, now buildInputs) string {
	var why []string
	short := func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	}
	if was.Image != now.Image || was.Rootfs != now.Rootfs || was.Initrd != now.Initrd || was.Cmdline != now.Cmdline {
		why = append(why, fmt.Sprintf("guest image changed (%s, now %s)", short(was.Image), short(now.Image)))
	}
	if was.Kernel != now.Kernel {
		why = append(why, "kernel changed")
	}
	if was.Machine != now.Machine || was.VMM != now.VMM || was.Accel != now.Accel {
		why = append(why, fmt.Sprintf("machine changed (%s %s %s, now %s %s %s)", was.VMM, was.Machine, was.Accel, now.VMM, now.Machine, now.Accel))
	}
	return strings.Join(why, "; ")
}

// staleReasonLabels are staleReasons' causes as metric labels.
func staleReasonLabel(why string) string {
	switch {
	case strings.HasPrefix(why, "guest image"):
		return "image"
	case strings.HasPrefix(why, "kernel"):
		return "kernel"
	case strings.HasPrefix(why, "machine"):
		return "machine"
	}
	return "other"
}

// staleNote is why a version is stale, "" if it is not.
func (s *Service) staleNote(function string, number int) string {
	if number <= 0 {
		return ""
	}
	return s.versions.StaleNote(function, number)
}

// checkVersions finds the stale versions (at start) and rebuilds them in
// the background: aliased versions first, newest first.
func (s *Service) checkVersions(ctx context.Context) error {
	vs, err := s.db.ListVersions(ctx, "")
	if err != nil {
		return err
	}
	aliases, err := s.db.ListAliases(ctx, "")
	if err != nil {
		return err
	}
	aliased := map[string]bool{}
	for _, a := range aliases {
		if r, err := dversions.AliasRouting(a); err == nil {
			for _, n := range r.Versions() {
				aliased[versionKey(a.Function, n)] = true
			}
		}
	}
	now := s.buildInputs(nil)
	var todo []*catalog.Version
	for _, v := range vs {
		var was buildInputs
		if v.Collected || json.Unmarshal(v.Inputs, &was) != nil {
			continue
		}
		if why := staleReasons(was, now); why != "" {
			s.versions.MarkStale(v.Function, v.Number, why)
			s.log.Warn("version stale: rebuilding it", "function", v.Function, "version", v.Number, "why", why)
			todo = append(todo, v)
		}
	}
	sort.SliceStable(todo, func(i, j int) bool {
		ai, aj := aliased[versionKey(todo[i].Function, todo[i].Number)], aliased[versionKey(todo[j].Function, todo[j].Number)]
		if ai != aj {
			return ai
		}
		return todo[i].CreatedAt.After(todo[j].CreatedAt)
	})
	for _, v := range todo {
		if _, err := s.startRebuild(ctx, v); err != nil {
			s.log.Error("start a rebuild", "function", v.Function, "version", v.Number, "err", err)
		}
	}
	return nil
}

// startRebuild rebuilds a stale version as an operation; rebuilds run one
// at a time.
func (s *Service) startRebuild(ctx context.Context, v *catalog.Version) (*Operation, error) {
	return s.startOperation(ctx, wire.OpRebuild, versionKey(v.Function, v.Number), func(ctx context.Context) (*wire.OperationResult, error) {
		phase(ctx, "waiting for earlier rebuilds")
		release, err := s.versions.AcquireRebuild(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		res, err := s.rebuild(ctx, v)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Deploy: res}, nil
	})
}

// rebuild snapshots a version again with what the daemon runs now, the
// way it was deployed, then deletes its older snapshots.
func (s *Service) rebuild(ctx context.Context, v *catalog.Version) (res *DeployResult, err error) {
	why := s.staleNote(v.Function, v.Number)
	defer func() {
		outcome := "ok"
		if err != nil {
			outcome = "failed"
			s.log.Error("version rebuild failed", "function", v.Function, "version", v.Number, "err", err)
		}
		s.metrics.VersionRebuild(staleReasonLabel(why), outcome)
	}()
	t0 := time.Now()
	// The function may have been deleted, or the version collected, while
	// the rebuild waited for its turn.
	if cur, err := s.db.GetVersion(ctx, v.Function, v.Number); err != nil || cur.Collected {
		if err == nil {
			err = fmt.Errorf("%w: version %s:%d was collected", ErrConflict, v.Function, v.Number)
		}
		return nil, err
	}
	old, err := s.db.ListSnapshots(ctx, v.Function)
	if err != nil {
		return nil, err
	}
	cfg := v.Config
	res = &DeployResult{Function: v.Function, Version: v.Number, Digest: v.Digest}
	var made []string
	if v.RecordEvent != nil {
		req := PrepareRequest{Function: v.Function}
		if string(v.RecordEvent) != "null" {
			req.RecordEvent = v.RecordEvent
		}
		timeout, err := s.checkPrepareOptions(&req)
		if err != nil {
			return nil, err
		}
		p, err := s.prepareWith(subProgress(ctx, "prepare: "), req, timeout, &cfg, v.Number)
		if err != nil {
			return nil, err
		}
		made = []string{p.Clean.ID, p.Warm.ID}
		res.Timing.PrepareMS, res.Timing.BootMS = ms(time.Since(t0)), p.Timing.BootMS
	} else {
		vm, err := s.bootFunction(subProgress(ctx, "boot: "), &cfg, v.Number)
		if err != nil {
			return nil, err
		}
		res.Timing.BootMS = vm.BootMS
		sn, err := s.CreateSnapshot(ctx, vm.ID)
		_ = s.DeleteVM(context.WithoutCancel(ctx), vm.ID)
		if err != nil {
			return nil, err
		}
		made = []string{sn.ID}
	}
	inputs, _ := json.Marshal(s.buildInputs(&cfg))
	if err := s.db.SetVersionInputs(ctx, v.Function, v.Number, inputs); err != nil {
		for _, id := range made { // the version went meanwhile: so do its new snapshots
			_ = s.DeleteSnapshot(context.WithoutCancel(ctx), id)
		}
		return nil, err
	}
	s.versions.ClearStale(v.Function, v.Number)
	for _, sn := range old {
		if sn.Version != v.Number {
			continue
		}
		if err := s.DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, ErrNotFound) {
			s.log.Warn("rebuild: an older snapshot stays", "snapshot", sn.ID, "err", err)
		}
	}
	res.Snapshots, res.Timing.TotalMS = made, ms(time.Since(t0))
	s.log.Info("version rebuilt", "function", v.Function, "version", v.Number, "was", why, "total_ms", res.Timing.TotalMS)
	return res, nil
}

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
	vm, err := s.bootFunction(ctx, &v.Config, v.Number)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := s.DeleteVM(context.WithoutCancel(ctx), vm.ID); err != nil {
			s.log.Warn("delete the vm booted for a stale version", "vm", vm.ID, "err", err)
		}
	}()
	lv, err := s.lockLive(ctx, vm.ID, catalog.StateRunning)
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
