package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/internal/vmnet"
	"github.com/thaw-dev/thaw/wire"
)

// DeploySpec asks for a deploy: the function's code and configuration (a
// setting left zero keeps the function's current one), and what to do
// with the new version.
type DeploySpec struct {
	FunctionSpec
	NoPromote   bool            // leave the live alias alone
	Prepare     bool            // also build the strategies' artifacts (a warm snapshot)
	RecordEvent json.RawMessage // the prepare's record input
}

// DeployResult is what a deploy published.
type DeployResult = wire.Deploy

// deployment is a deploy whose code is staged: what its operation needs.
type deployment struct {
	spec    DeploySpec
	staging string // the staged code; removed when the deploy ends
	release func() // the name's reservation
	prev    *catalog.Function
	t0      time.Time
}

// Deploy creates or updates a function and publishes an immutable version
// of it in one step: the code's disk and dependency layer are built (or
// reused), a VM of the new configuration boots (a handler that cannot be
// imported fails the deploy with its traceback) and is snapshotted, and
// the version is published with its snapshot, the live alias moved to it
// unless NoPromote. A deploy of the content of an existing version
// returns that version and changes nothing. Deploys of one function run
// one at a time, in order; a deploy that fails or is interrupted leaves
// no version, no snapshot and no code behind.
func (s *Service) Deploy(ctx context.Context, spec DeploySpec) (*DeployResult, error) {
	d, err := s.beginDeploy(ctx, spec)
	if err != nil {
		return nil, err
	}
	return s.deploy(ctx, d)
}

// StartDeploy runs a deploy as an operation; the code is read before it
// answers.
func (s *Service) StartDeploy(ctx context.Context, spec DeploySpec) (*Operation, error) {
	d, err := s.beginDeploy(ctx, spec)
	if err != nil {
		return nil, err
	}
	op, err := s.startOperation(ctx, wire.OpDeploy, spec.Name, func(ctx context.Context) (*wire.OperationResult, error) {
		res, err := s.deploy(ctx, d)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Deploy: res}, nil
	})
	if err != nil {
		d.end()
		return nil, err
	}
	return op, nil
}

// beginDeploy checks the request and stages the code (reading an upload
// while its request lasts).
func (s *Service) beginDeploy(ctx context.Context, spec DeploySpec) (*deployment, error) {
	d := &deployment{spec: spec, t0: time.Now()}
	if err := ValidName(spec.Name); err != nil {
		return nil, err
	}
	if spec.Prepare {
		if _, err := s.checkPrepareOptions(&PrepareRequest{Function: spec.Name, RecordEvent: spec.RecordEvent}); err != nil {
			return nil, err
		}
	} else if len(spec.RecordEvent) > 0 {
		return nil, fmt.Errorf("%w: record_event is the input of a prepare: give prepare too", ErrInvalid)
	}
	prev, err := s.db.GetFunction(ctx, spec.Name)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, err
	}
	d.prev = prev
	inheritSettings(&d.spec.FunctionSpec, prev)
	if _, err := s.functions.CheckSpec(&d.spec.FunctionSpec); err != nil {
		return nil, err
	}
	if d.release, err = s.claimName(spec.Name); err != nil {
		return nil, err
	}
	if d.staging, err = s.functions.StageCode(ctx, d.spec.FunctionSpec); err != nil {
		d.release()
		return nil, err
	}
	return d, nil
}

func (d *deployment) end() {
	os.RemoveAll(d.staging)
	d.release()
}

// inheritSettings fills the settings a deploy left out from the
// function's current configuration.
func inheritSettings(spec *FunctionSpec, prev *catalog.Function) {
	if prev == nil {
		return
	}
	for _, f := range []struct{ dst, src *int }{{&spec.MemoryMiB, &prev.MemoryMiB}, {&spec.VCPUs, &prev.VCPUs},
		{&spec.MaxConcurrency, &prev.MaxConcurrency}, {&spec.KeepAliveS, &prev.KeepAliveS},
		{&spec.VMMPool, &prev.VMMPool}, {&spec.VMMPoolTTLS, &prev.VMMPoolTTLS}} {
		if *f.dst == 0 {
			*f.dst = *f.src
		}
	}
	if spec.Network.Egress == "" && len(spec.Network.Services) == 0 {
		spec.Network.Egress = vmnet.Egress(prev.Network.Egress)
		spec.Network.Services = prev.Network.Services
	}
	if spec.Env == nil {
		spec.Env = prev.Env
	}
	if spec.Secrets == nil {
		spec.Secrets = prev.Secrets
	}
}

// claimName keeps creates of name out while deploys of it run (deploys
// of one name queue on their own lock instead).
func (s *Service) claimName(name string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creating[name] < 0 {
		return nil, fmt.Errorf("function %q is being created: %w", name, ErrExists)
	}
	s.creating[name]++
	return func() {
		s.mu.Lock()
		if s.creating[name]--; s.creating[name] == 0 {
			delete(s.creating, name)
		}
		s.mu.Unlock()
	}, nil
}

// deploy does Deploy's work once the code is staged.
func (s *Service) deploy(ctx context.Context, d *deployment) (res *DeployResult, err error) {
	defer d.end()
	ctx, sp := s.span(ctx, SpanDeploy, AttrFunction.String(d.spec.Name))
	defer func() {
		outcome := "published"
		switch {
		case err != nil:
			outcome = "failed"
		case res.Unchanged:
			outcome = "unchanged"
		}
		s.metrics.Deploy(outcome)
		endSpan(sp, err)
	}()
	lock := s.vers.deployLock(d.spec.Name)
	phase(ctx, "waiting for the function's earlier deploys")
	lock.Lock()
	defer lock.Unlock()
	res = &DeployResult{Function: d.spec.Name}
	t := time.Now()
	phase(ctx, "building code and dependencies")
	netw, err := s.functions.CheckSpec(&d.spec.FunctionSpec)
	if err != nil {
		return nil, err
	}
	endDeps := s.functions.Deps().Begin() // its layer stays until the version is published
	defer func() { endDeps(); s.functions.KickDepsGC() }()
	cfg, err := s.functions.BuildFunction(ctx, d.spec.FunctionSpec, netw, d.staging)
	if err != nil {
		return nil, err
	}
	res.Timing.BuildMS = ms(time.Since(t))
	published := false
	defer func() {
		if !published {
			_ = os.RemoveAll(filepath.Dir(cfg.CodeDir))
		}
	}()
	res.Digest = s.versionDigest(cfg)
	if v, err := s.db.VersionByDigest(ctx, cfg.Name, res.Digest); err == nil && !v.Collected {
		res.Version, res.Unchanged = v.Number, true
		res.Timing.TotalMS = ms(time.Since(d.t0))
		s.log.Info("deploy unchanged", "function", cfg.Name, "version", v.Number)
		return res, nil
	}
	snaps, err := s.snapshotDeploy(ctx, d, cfg, res)
	if err != nil {
		return nil, err
	}
	v, err := s.publish(ctx, d, cfg, res.Digest, snaps)
	if err != nil {
		s.dropPending(ctx, snaps)
		return nil, err
	}
	published = true
	res.Version, res.Promoted, res.Snapshots = v.Number, !d.spec.NoPromote, snaps
	res.Timing.TotalMS = ms(time.Since(d.t0))
	s.log.Info("deployed", "function", cfg.Name, "version", v.Number, "promoted", res.Promoted, "digest", res.Digest[:12],
		"total_ms", res.Timing.TotalMS)
	return res, nil
}

// snapshotDeploy boots the new configuration and snapshots it (or
// prepares it: clean and warm snapshots); its snapshots are pending
// (version -1) until the version is published, and are deleted if the
// deploy fails.
func (s *Service) snapshotDeploy(ctx context.Context, d *deployment, cfg *catalog.Function, res *DeployResult) ([]string, error) {
	if d.spec.Prepare {
		t := time.Now()
		req := PrepareRequest{Function: cfg.Name, RecordEvent: d.spec.RecordEvent}
		timeout, err := s.checkPrepareOptions(&req)
		if err != nil {
			return nil, err
		}
		p, err := s.prepareWith(subProgress(ctx, "prepare: "), req, timeout, cfg, -1)
		if err != nil {
			s.dropPendingOf(ctx, cfg.Name)
			return nil, err
		}
		res.Timing.BootMS, res.Timing.SnapshotMS = p.Timing.BootMS, p.Timing.CleanSnapshotMS
		res.Timing.PrepareMS = ms(time.Since(t))
		return []string{p.Clean.ID, p.Warm.ID}, nil
	}
	vm, err := s.bootFunction(subProgress(ctx, "boot: "), cfg, -1)
	if err != nil {
		return nil, err
	}
	res.Timing.BootMS = vm.BootMS
	t := time.Now()
	phase(ctx, "snapshot")
	sn, err := s.CreateSnapshot(ctx, vm.ID)
	if derr := s.DeleteVM(context.WithoutCancel(ctx), vm.ID); derr != nil {
		s.log.Warn("deploy: delete the booted vm", "vm", vm.ID, "err", derr)
	}
	if err != nil {
		return nil, err
	}
	res.Timing.SnapshotMS = ms(time.Since(t))
	return []string{sn.ID}, nil
}

// publish enters the version, its snapshots and the function's new
// configuration at once, then applies retention.
func (s *Service) publish(ctx context.Context, d *deployment, cfg *catalog.Function, digest string, snaps []string) (*catalog.Version, error) {
	phase(ctx, "publishing")
	row := *cfg
	if d.prev != nil {
		row.CreatedAt = d.prev.CreatedAt
	}
	inputs, _ := json.Marshal(s.buildInputs(cfg))
	p := catalog.Publish{Function: &row, Snapshots: snaps,
		Version: &catalog.Version{Function: cfg.Name, Digest: digest, Config: *cfg, Inputs: inputs, CreatedAt: time.Now()}}
	if d.spec.Prepare {
		p.Version.RecordEvent = d.spec.RecordEvent
		if len(p.Version.RecordEvent) == 0 {
			p.Version.RecordEvent = json.RawMessage("null")
		}
	}
	if !d.spec.NoPromote {
		p.Promote = []string{versions.Live}
	}
	v, err := s.functions.PublishVersion(context.WithoutCancel(ctx), p)
	if err != nil {
		return nil, err
	}
	s.vers.mu.Lock()
	for _, id := range snaps {
		delete(s.vers.pending, id)
	}
	s.vers.mu.Unlock()
	if d.prev != nil {
		s.removeOldCode(ctx, d.prev)
	}
	s.collectVersions(ctx, cfg.Name)
	for _, id := range snaps {
		if sn, err := s.db.GetSnapshot(ctx, id); err == nil && sn.Parent != "" {
			s.autoPush(ctx, id) // a prepared warm snapshot, as prepare pushes it
		}
	}
	return v, nil
}

// removeOldCode deletes the code a function pointed to before a deploy
// replaced it, unless a version still uses it.
func (s *Service) removeOldCode(ctx context.Context, prev *catalog.Function) {
	used, err := s.codeDirsInUse(ctx)
	if err != nil {
		return
	}
	if dir := filepath.Dir(prev.CodeDir); !used[dir] {
		if err := os.RemoveAll(dir); err != nil {
			s.log.Warn("remove the code a deploy replaced", "function", prev.Name, "err", err)
		}
	}
}

// dropPending deletes a failed deploy's snapshots.
func (s *Service) dropPending(ctx context.Context, snaps []string) {
	for _, id := range snaps {
		if err := s.DeleteSnapshot(context.WithoutCancel(ctx), id); err != nil && !errors.Is(err, ErrNotFound) {
			s.log.Error("remove a failed deploy's snapshot", "snapshot", id, "err", err)
		}
		s.vers.mu.Lock()
		delete(s.vers.pending, id)
		s.vers.mu.Unlock()
	}
}

// dropPendingOf deletes function's pending snapshots (a prepare that failed
// halfway made some).
func (s *Service) dropPendingOf(ctx context.Context, function string) {
	snaps, err := s.db.ListSnapshots(ctx, function)
	if err != nil {
		return
	}
	var ids []string
	for _, sn := range snaps {
		if sn.Version < 0 {
			ids = append(ids, sn.ID)
		}
	}
	s.dropPending(ctx, ids)
}

// versionDigest identifies a version's content: its code, dependencies and
// configuration, and the guest image, kernel and machine it runs on.
func (s *Service) versionDigest(cfg *catalog.Function) string {
	var layer string // the resolved set: unpinned requirements may resolve anew
	if cfg.Deps != nil {
		layer = cfg.Deps.Layer
	}
	content := struct {
		Code      string            `json:"code"` // the environment is in it (fnconfig.Digest)
		MemoryMiB int               `json:"memory_mib"`
		VCPUs     int               `json:"vcpus"`
		Network   catalog.Network   `json:"network"`
		Secrets   map[string]string `json:"secrets,omitempty"`
		Deps      string            `json:"deps,omitempty"`
		Build     buildInputs       `json:"build"`
	}{cfg.Digest, cfg.MemoryMiB, cfg.VCPUs, cfg.Network, cfg.Secrets, layer, s.buildInputs(cfg)}
	b, _ := json.Marshal(content)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// buildInputs is what a version's snapshot is made from besides its own
// code and settings: when any of it changes, the snapshot is stale.
type buildInputs struct {
	Image   string `json:"image"`   // the guest image's content hash
	Kernel  string `json:"kernel"`  // sha256 of the kernel file booted
	Rootfs  string `json:"rootfs"`  // sha256 of the root file system
	Initrd  string `json:"initrd"`  // sha256 of the initramfs
	Cmdline string `json:"cmdline"` // the image's kernel command line
	Machine string `json:"machine"` // the VMM's machine (devices)
	VMM     string `json:"vmm"`     // the VMM and its version
	Accel   string `json:"accel"`
}

func (s *Service) buildInputs(_ *catalog.Function) buildInputs {
	file := func(name string) string { return s.image.Files[name].SHA256 }
	return buildInputs{Image: s.image.Hash, Kernel: file(s.image.KernelFile()), Rootfs: file(guestimage.Rootfs),
		Initrd: file(guestimage.Initrd), Cmdline: s.image.Cmdline, Machine: s.cfg.VMM.MachineABI(),
		VMM: s.cfg.VMM.Name() + " " + s.vmmVersion, Accel: s.accel.Accel}
}
