package functions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Function dependencies (package deps): a function directory's
// requirements.txt becomes a dependency layer, attached to every VM of the
// function as the disk after its code disk (/dev/vdc, mounted at /deps).

// RequirementsFile is the name of a function's requirements in its
// directory.
const RequirementsFile = "requirements.txt"

// DefaultDepsBudget bounds the dependency cache (wheels and unused layers).
const DefaultDepsBudget = 10 << 30

// DepsConfig configures function dependencies.
type DepsConfig struct {
	Python    string   // host interpreter that runs pip ("python3")
	IndexURL  string   // "" PyPI; "none": only FindLinks
	FindLinks []string // directories or URLs of wheels
	Format    string   // layer file system: erofs (default) or ext4
	// Compression of erofs layers (none by default; lz4, lz4hc): for
	// measurements only (a node must not mix them).
	Compression string
	Timeout     time.Duration // one index connection or read (0: deps.DefaultTimeout)
	// Budget bounds the bytes of cached wheels and of layers no function
	// and no snapshot uses (0: DefaultDepsBudget; negative: no bound).
	Budget int64
}

// SetDefaults fills the zero settings.
func (c *DepsConfig) SetDefaults() {
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.Format == "" {
		c.Format = string(deps.FormatErofs)
	}
	switch {
	case c.Budget == 0:
		c.Budget = DefaultDepsBudget
	case c.Budget < 0:
		c.Budget = -1
	}
}

// Validate reports every problem of the settings.
func (c *DepsConfig) Validate() []error {
	var errs []error
	if _, err := deps.ParseFormat(c.Format); err != nil {
		errs = append(errs, err)
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("pip timeout %s must not be negative", c.Timeout))
	}
	return errs
}

// DepsDir holds the dependency cache (wheels and layers).
func (m *Manager) DepsDir() string { return filepath.Join(m.cfg.DataDir, "deps") }

// openDeps opens the dependency cache under the data directory.
func (m *Manager) openDeps() (*deps.Manager, error) {
	c := m.cfg.Deps
	return deps.Open(deps.Options{Dir: m.DepsDir(), Python: c.Python, IndexURL: c.IndexURL,
		FindLinks: c.FindLinks, Format: deps.Format(c.Format), Compression: c.Compression, Timeout: c.Timeout,
		Retries: deps.DefaultRetries, Budget: c.Budget})
}

// Deps is the node's dependency machinery (a deploy resolves and builds
// through it).
func (m *Manager) Deps() *deps.Manager { return m.deps }

// depsErr maps package deps' errors to the service's.
func depsErr(err error) error {
	switch {
	case errors.Is(err, deps.ErrInvalid):
		return fmt.Errorf("%w: %w", errdefs.ErrInvalid, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w; nothing was kept", errdefs.ErrNoSpace, err)
	}
	return err
}

// functionDeps resolves and builds the layer of the requirements.txt at
// the top of code, if there is one; given (the deps a registry record
// names) are taken as they are: the pull that creates the function brings
// their layer. The caller holds the collection off (deps.Manager.Begin)
// until the function is recorded.
func (m *Manager) functionDeps(ctx context.Context, code string, given *catalog.Deps) (*catalog.Deps, error) {
	if given != nil {
		if _, err := deps.ParseLock(given.Resolved); err != nil {
			return nil, fmt.Errorf("%w: the recorded dependencies: %v", errdefs.ErrSnapshotUnusable, err)
		}
		return given, nil
	}
	b, err := readRequirements(filepath.Join(code, RequirementsFile))
	if err != nil || b == nil {
		return nil, err
	}
	end := m.deps.Begin()
	defer end()
	m.d.Phase(ctx, "dependencies")
	reqs, l, built, err := m.deps.Prepare(ctx, b)
	if err != nil {
		return nil, depsErr(err)
	}
	if built {
		m.log.Info("dependency layer built", "layer", l.Digest[:12], "format", l.Format, "bytes", l.Bytes, "wheels", len(l.Lines), "build_ms", l.BuildMS)
	}
	return &catalog.Deps{Requested: reqs.Lines(), Resolved: l.Lines, Layer: l.Digest, LayerSHA256: l.SHA256,
		LayerBytes: l.Bytes, Format: string(l.Format)}, nil
}

// readRequirements reads a function's requirements.txt: nil without one.
// It must be a regular file of bounded size.
func readRequirements(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errdefs.ErrInvalid, RequirementsFile, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", errdefs.ErrInvalid, RequirementsFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, deps.MaxRequirementsBytes+1))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// LayerOf is fn's dependency layer, checked: present, the image the
// function was created with (its SHA-256, hashed once per daemon process
// and again whenever the file's stamp changes). nil without one.
func (m *Manager) LayerOf(fn *catalog.Function) (*deps.Layer, error) {
	if fn.Deps == nil {
		return nil, nil
	}
	l, err := m.deps.Layers.Get(fn.Deps.Layer)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	err = snapshot.VerifyOnce(l.Path, func(full bool) error {
		if l.SHA256 != fn.Deps.LayerSHA256 {
			return fmt.Errorf("is another image (sha256 %.12s) than the function's (%.12s)", l.SHA256, fn.Deps.LayerSHA256)
		}
		if !full {
			return nil
		}
		sum, err := snapshot.HashFile(l.Path)
		if err != nil {
			return err
		}
		if sum.SHA256 != l.SHA256 {
			return fmt.Errorf("image changed on disk (sha256 %.12s, recorded %.12s)", sum.SHA256, l.SHA256)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("function %s: %w: %s: %v", fn.Name, deps.ErrLayerMissing, fn.Deps.Layer[:12], err)
	}
	return l, nil
}

// AttachDeps adds fn's layer to a VM's spec: the disk after the code disk,
// and the kernel parameter that tells the agent its file system.
func (m *Manager) AttachDeps(spec *vmm.Spec, fn *catalog.Function) {
	if fn.Deps == nil {
		return
	}
	spec.Disks = append(spec.Disks, vmm.Disk{Path: filepath.Join(m.deps.Layers.Dir(), fn.Deps.Layer, deps.ImageFile), ReadOnly: true})
	spec.Cmdline += " thaw.deps=" + fn.Deps.Format
}

// DepsInput is the snapshot input naming fn's layer image.
func DepsInput(fn *catalog.Function) *snapshot.Digest {
	if fn.Deps == nil {
		return nil
	}
	return &snapshot.Digest{SHA256: fn.Deps.LayerSHA256}
}

// CheckDepsInput compares a snapshot's layer with the function's.
func CheckDepsInput(m *snapshot.Manifest, fn *catalog.Function) error {
	got, want := m.Inputs.Deps, DepsInput(fn)
	switch {
	case got == nil && want == nil:
		return nil
	case got == nil:
		return fmt.Errorf("%w: the snapshot was taken without the function's dependency layer", snapshot.ErrIncompatible)
	case want == nil:
		return fmt.Errorf("%w: the snapshot has a dependency layer, the function none", snapshot.ErrIncompatible)
	case *got != *want:
		return fmt.Errorf("%w: dependency layer digest differs from the snapshot's", snapshot.ErrIncompatible)
	}
	return nil
}

// KickDepsGC asks the collection loop for a run (a function or snapshot
// went, a layer came).
func (m *Manager) KickDepsGC() {
	select {
	case m.depsGC <- struct{}{}:
	default:
	}
}

// CollectDepsLoop checks the host's Python for pip (saying at start if
// functions with a requirements.txt cannot be created), then runs a
// collection of the dependency cache whenever asked, until stop is closed.
func (m *Manager) CollectDepsLoop(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	if err := m.deps.Resolver.CheckPython(ctx); err != nil && ctx.Err() == nil {
		m.log.Warn("functions with a requirements.txt cannot be created until this is fixed", "err", err)
	}
	for {
		select {
		case <-stop:
			return
		case <-m.depsGC:
			m.CollectDeps(context.Background())
		}
	}
}

// CollectDeps removes the least recently used wheels and unused layers
// beyond the budget. A layer is in use while a function names it or a
// snapshot was taken with it.
func (m *Manager) CollectDeps(ctx context.Context) {
	st, err := m.deps.Collect(func() (map[string]bool, error) { return m.layersInUse(ctx) })
	if errors.Is(err, deps.ErrBusy) {
		m.log.Debug("dependency cache collection postponed: a create or pull is adding to it")
		return
	}
	if err != nil {
		m.log.Warn("dependency cache collection", "err", err)
		return
	}
	if st.Layers > 0 || st.Wheels > 0 {
		m.log.Info("dependency cache collected", "layers", st.Layers, "wheels", st.Wheels, "freed_bytes", st.FreedBytes,
			"used_bytes", st.UsedBytes, "budget_bytes", st.BudgetBytes)
	}
}

// layersInUse are the digests of the layers functions and their versions
// that still have snapshots name, and of those whose image a snapshot's
// manifest names.
func (m *Manager) layersInUse(ctx context.Context) (map[string]bool, error) {
	db := m.d.Catalog
	fns, err := db.ListFunctions(ctx)
	if err != nil {
		return nil, err
	}
	vers, err := db.ListVersions(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, v := range vers {
		if !v.Collected {
			fns = append(fns, &v.Config)
		}
	}
	out := map[string]bool{}
	bySHA := map[string]string{}
	for _, f := range fns {
		if f.Deps != nil {
			out[f.Deps.Layer] = true
			bySHA[f.Deps.LayerSHA256] = f.Deps.Layer
		}
	}
	snaps, err := db.ListSnapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		man, err := snapshot.ReadManifest(sn.Dir)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", sn.ID, err)
		}
		if man.Inputs.Deps == nil {
			continue
		}
		d, ok := bySHA[man.Inputs.Deps.SHA256]
		if !ok {
			return nil, fmt.Errorf("snapshot %s names a dependency layer no function has", sn.ID)
		}
		out[d] = true
	}
	return out, nil
}

// PushedLayer is fn's layer as a push carries it: its description and
// image file (nil without one).
func (m *Manager) PushedLayer(fn *catalog.Function) (*registry.Layer, string, error) {
	l, err := m.LayerOf(fn)
	if err != nil || l == nil {
		return nil, "", err
	}
	return &registry.Layer{Digest: l.Digest, Format: string(l.Format), Lines: l.Lines, SHA256: l.SHA256, Bytes: l.Bytes}, l.Path, nil
}

// PullLayer puts the dependency layer of a remote snapshot in the layer
// store, unless it is here: fetched whole through the chunk cache, then
// adopted (its size, SHA-256 and digest checked). Lazy pulls fetch it too:
// the guest reads it as a disk.
func (m *Manager) PullLayer(ctx context.Context, rm *registry.RemoteManifest) error {
	want := rm.Layer
	if want == nil {
		return nil
	}
	if have, err := m.deps.Layers.Get(want.Digest); err == nil {
		if have.SHA256 != want.SHA256 {
			return fmt.Errorf("%w: snapshot %s: its dependency layer %.12s is another image than this node's", errdefs.ErrSnapshotUnusable, rm.ID, want.Digest)
		}
		return nil
	}
	m.d.Phase(ctx, "dependency layer")
	tmp, err := os.MkdirTemp(m.deps.Layers.Dir(), ".tmp-pull-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	img := filepath.Join(tmp, deps.ImageFile)
	if err := m.d.PullFile(ctx, rm, registry.LayerPath, img); err != nil {
		return err
	}
	if _, err := m.deps.Layers.Adopt(img, deps.Layer{Digest: want.Digest, Format: deps.Format(want.Format), Lines: want.Lines,
		SHA256: want.SHA256, Bytes: want.Bytes, BuiltAt: time.Now().UTC()}); err != nil {
		return fmt.Errorf("%w: snapshot %s: %v", errdefs.ErrSnapshotUnusable, rm.ID, err)
	}
	m.log.Info("dependency layer pulled", "layer", want.Digest[:12], "snapshot", rm.ID, "bytes", want.Bytes)
	return nil
}

// CatalogDeps is a function's deps from its registry record.
func CatalogDeps(d *registry.FunctionDeps) *catalog.Deps {
	if d == nil {
		return nil
	}
	return &catalog.Deps{Requested: d.Requested, Resolved: d.Lines, Layer: d.Digest, LayerSHA256: d.SHA256,
		LayerBytes: d.Bytes, Format: d.Format}
}
