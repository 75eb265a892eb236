package versions

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
	"github.com/thaw-dev/thaw/internal/errdefs"
	ver "github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// DeployRequest asks for a deploy of a function and says what to do with
// the new version; the function's code and settings are the daemon's to
// read, through Stage.
type DeployRequest struct {
	Name        string
	NoPromote   bool            // leave the live alias alone
	Prepare     bool            // also build the strategies' artifacts (a warm snapshot)
	RecordEvent json.RawMessage // the prepare's record input
	// Stage checks the function's settings (filling those left out from
	// its current configuration prev, nil for a new function), reserves
	// its name and stages its code, before the deploy answers.
	Stage func(ctx context.Context, prev *catalog.Function) (Code, error)
}

// Code is a deploy's function with its code staged.
type Code interface {
	// Build checks the settings again and builds the code's disk and
	// dependency layer; done releases the layer once the version is
	// published or given up (on an error, Build released it).
	Build(ctx context.Context) (fn *catalog.Function, done func(), err error)
	// Discard removes the staged code and releases the name.
	Discard()
}

// Deployment is a deploy whose code is staged: Run does it, Discard
// gives it up.
type Deployment struct {
	m    *Manager
	req  DeployRequest
	code Code
	prev *catalog.Function
	t0   time.Time
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
func (m *Manager) Deploy(ctx context.Context, req DeployRequest) (*wire.Deploy, error) {
	d, err := m.BeginDeploy(ctx, req)
	if err != nil {
		return nil, err
	}
	return d.Run(ctx)
}

// BeginDeploy checks the request and stages the code (reading an upload
// while its request lasts).
func (m *Manager) BeginDeploy(ctx context.Context, req DeployRequest) (*Deployment, error) {
	d := &Deployment{m: m, req: req, t0: time.Now()}
	if err := m.deps.ValidName(req.Name); err != nil {
		return nil, err
	}
	if req.Prepare {
		if err := m.deps.CheckPrepare(req.Name, req.RecordEvent); err != nil {
			return nil, err
		}
	} else if len(req.RecordEvent) > 0 {
		return nil, fmt.Errorf("%w: record_event is the input of a prepare: give prepare too", errdefs.ErrInvalid)
	}
	prev, err := m.db.GetFunction(ctx, req.Name)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, err
	}
	d.prev = prev
	if d.code, err = req.Stage(ctx, prev); err != nil {
		return nil, err
	}
	return d, nil
}

// Discard gives up a deploy that will not run.
func (d *Deployment) Discard() { d.code.Discard() }

// Run does the deploy once its code is staged.
func (d *Deployment) Run(ctx context.Context) (res *wire.Deploy, err error) {
	m := d.m
	defer d.code.Discard()
	ctx, end := m.deps.TraceDeploy(ctx, d.req.Name)
	defer func() {
		outcome := "published"
		switch {
		case err != nil:
			outcome = "failed"
		case res.Unchanged:
			outcome = "unchanged"
		}
		m.deps.Metrics.Deploy(outcome)
		end(err)
	}()
	lock := m.deployLock(d.req.Name)
	m.deps.Phase(ctx, "waiting for the function's earlier deploys")
	lock.Lock()
	defer lock.Unlock()
	res = &wire.Deploy{Function: d.req.Name}
	t := time.Now()
	m.deps.Phase(ctx, "building code and dependencies")
	cfg, done, err := d.code.Build(ctx)
	if err != nil {
		return nil, err
	}
	defer done() // the layer stays until the version is published
	res.Timing.BuildMS = ms(time.Since(t))
	published := false
	defer func() {
		if !published {
			_ = os.RemoveAll(filepath.Dir(cfg.CodeDir))
		}
	}()
	res.Digest = Digest(cfg, m.deps.BuildInputs())
	if v, err := m.db.VersionByDigest(ctx, cfg.Name, res.Digest); err == nil && !v.Collected {
		res.Version, res.Unchanged = v.Number, true
		res.Timing.TotalMS = ms(time.Since(d.t0))
		m.log.Info("deploy unchanged", "function", cfg.Name, "version", v.Number)
		return res, nil
	}
	snaps, err := d.snapshot(ctx, cfg, res)
	if err != nil {
		return nil, err
	}
	v, err := d.publish(ctx, cfg, res.Digest, snaps)
	if err != nil {
		m.dropPending(ctx, snaps)
		return nil, err
	}
	published = true
	res.Version, res.Promoted, res.Snapshots = v.Number, !d.req.NoPromote, snaps
	res.Timing.TotalMS = ms(time.Since(d.t0))
	m.log.Info("deployed", "function", cfg.Name, "version", v.Number, "promoted", res.Promoted, "digest", res.Digest[:12],
		"total_ms", res.Timing.TotalMS)
	return res, nil
}

// snapshot boots the new configuration and snapshots it (or prepares it:
// clean and warm snapshots); its snapshots are pending (version -1) until
// the version is published, and are deleted if the deploy fails.
func (d *Deployment) snapshot(ctx context.Context, cfg *catalog.Function, res *wire.Deploy) ([]string, error) {
	m := d.m
	if d.req.Prepare {
		t := time.Now()
		p, err := m.deps.Prepare(m.deps.SubProgress(ctx, "prepare: "), cfg, -1, d.req.RecordEvent)
		if err != nil {
			m.dropPendingOf(ctx, cfg.Name)
			return nil, err
		}
		res.Timing.BootMS, res.Timing.SnapshotMS = p.Timing.BootMS, p.Timing.CleanSnapshotMS
		res.Timing.PrepareMS = ms(time.Since(t))
		return []string{p.Clean.ID, p.Warm.ID}, nil
	}
	vm, err := m.deps.Boot(m.deps.SubProgress(ctx, "boot: "), cfg, -1)
	if err != nil {
		return nil, err
	}
	res.Timing.BootMS = vm.BootMS
	t := time.Now()
	m.deps.Phase(ctx, "snapshot")
	sn, err := m.deps.CreateSnapshot(ctx, vm.ID)
	if derr := m.deps.DeleteVM(context.WithoutCancel(ctx), vm.ID); derr != nil {
		m.log.Warn("deploy: delete the booted vm", "vm", vm.ID, "err", derr)
	}
	if err != nil {
		return nil, err
	}
	res.Timing.SnapshotMS = ms(time.Since(t))
	return []string{sn.ID}, nil
}

// publish enters the version, its snapshots and the function's new
// configuration at once, then applies retention.
func (d *Deployment) publish(ctx context.Context, cfg *catalog.Function, digest string, snaps []string) (*catalog.Version, error) {
	m := d.m
	m.deps.Phase(ctx, "publishing")
	row := *cfg
	if d.prev != nil {
		row.CreatedAt = d.prev.CreatedAt
	}
	inputs, _ := json.Marshal(m.deps.BuildInputs())
	p := catalog.Publish{Function: &row, Snapshots: snaps,
		Version: &catalog.Version{Function: cfg.Name, Digest: digest, Config: *cfg, Inputs: inputs, CreatedAt: time.Now()}}
	if d.req.Prepare {
		p.Version.RecordEvent = d.req.RecordEvent
		if len(p.Version.RecordEvent) == 0 {
			p.Version.RecordEvent = json.RawMessage("null")
		}
	}
	if !d.req.NoPromote {
		p.Promote = []string{ver.Live}
	}
	v, err := m.deps.PublishVersion(context.WithoutCancel(ctx), p)
	if err != nil {
		return nil, err
	}
	m.forgetPending(snaps...)
	if d.prev != nil {
		m.removeOldCode(ctx, d.prev)
	}
	m.CollectVersions(ctx, cfg.Name)
	for _, id := range snaps {
		if sn, err := m.db.GetSnapshot(ctx, id); err == nil && sn.Parent != "" {
			m.deps.AutoPush(ctx, id) // a prepared warm snapshot, as prepare pushes it
		}
	}
	return v, nil
}

// removeOldCode deletes the code a function pointed to before a deploy
// replaced it, unless a version still uses it.
func (m *Manager) removeOldCode(ctx context.Context, prev *catalog.Function) {
	used, err := m.CodeDirsInUse(ctx)
	if err != nil {
		return
	}
	if dir := filepath.Dir(prev.CodeDir); !used[dir] {
		if err := os.RemoveAll(dir); err != nil {
			m.log.Warn("remove the code a deploy replaced", "function", prev.Name, "err", err)
		}
	}
}

// dropPending deletes a failed deploy's snapshots.
func (m *Manager) dropPending(ctx context.Context, snaps []string) {
	for _, id := range snaps {
		if err := m.deps.DeleteSnapshot(context.WithoutCancel(ctx), id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Error("remove a failed deploy's snapshot", "snapshot", id, "err", err)
		}
		m.forgetPending(id)
	}
}

// dropPendingOf deletes function's pending snapshots (a prepare that failed
// halfway made some).
func (m *Manager) dropPendingOf(ctx context.Context, function string) {
	snaps, err := m.db.ListSnapshots(ctx, function)
	if err != nil {
		return
	}
	var ids []string
	for _, sn := range snaps {
		if sn.Version < 0 {
			ids = append(ids, sn.ID)
		}
	}
	m.dropPending(ctx, ids)
}

// Digest identifies a version's content: its code, dependencies and
// configuration, and the guest image, kernel and machine it runs on.
func Digest(cfg *catalog.Function, inputs BuildInputs) string {
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
		Build     BuildInputs       `json:"build"`
	}{cfg.Digest, cfg.MemoryMiB, cfg.VCPUs, cfg.Network, cfg.Secrets, layer, inputs}
	b, _ := json.Marshal(content)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// BuildInputs is what a version's snapshot is made from besides its own
// code and settings: when any of it changes, the snapshot is stale.
type BuildInputs struct {
	Image   string `json:"image"`   // the guest image's content hash
	Kernel  string `json:"kernel"`  // sha256 of the kernel file booted
	Rootfs  string `json:"rootfs"`  // sha256 of the root file system
	Initrd  string `json:"initrd"`  // sha256 of the initramfs
	Cmdline string `json:"cmdline"` // the image's kernel command line
	Machine string `json:"machine"` // the VMM's machine (devices)
	VMM     string `json:"vmm"`     // the VMM and its version
	Accel   string `json:"accel"`
}
