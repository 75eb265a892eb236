package daemon

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
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Function dependencies (package deps): a function directory's
// requirements.txt becomes a dependency layer, attached to every VM of the
// function as the disk after its code disk (/dev/vdc, mounted at /deps).

// importFailure is a boot's ErrVMFailed that is also ErrImport, without
// saying so twice in its message.
type importFailure struct{ error }

func (f importFailure) Unwrap() error      { return f.error }
func (importFailure) Is(target error) bool { return target == ErrImport }

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

func (c *DepsConfig) setDefaults() {
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

func (c *DepsConfig) validate() []error {
	var errs []error
	if _, err := deps.ParseFormat(c.Format); err != nil {
		errs = append(errs, err)
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("pip timeout %s must not be negative", c.Timeout))
	}
	return errs
}

func (s *Service) depsDir() string { return filepath.Join(s.cfg.DataDir, "deps") }

// openDeps opens the dependency cache under the data directory.
func (s *Service) openDeps() error {
	m, err := deps.Open(deps.Options{Dir: s.depsDir(), Python: s.cfg.Deps.Python, IndexURL: s.cfg.Deps.IndexURL,
		FindLinks: s.cfg.Deps.FindLinks, Format: deps.Format(s.cfg.Deps.Format), Compression: s.cfg.Deps.Compression, Timeout: s.cfg.Deps.Timeout,
		Retries: deps.DefaultRetries, Budget: s.cfg.Deps.Budget})
	if err != nil {
		return err
	}
	s.deps, s.depsGC = m, make(chan struct{}, 1)
	return nil
}

// Deps is the node's dependency machinery (a deploy resolves and builds
// through it).
func (s *Service) Deps() *deps.Manager { return s.deps }

// depsErr maps package deps' errors to the service's.
func depsErr(err error) error {
	switch {
	case errors.Is(err, deps.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w; nothing was kept", ErrNoSpace, err)
	}
	return err
}

// functionDeps resolves and builds the layer of the requirements.txt at
// the top of code, if there is one; given (the deps a registry record
// names) are taken as they are: the pull that creates the function brings
// their layer. The caller holds the collection off (Manager.Begin) until
// the function is recorded.
func (s *Service) functionDeps(ctx context.Context, code string, given *catalog.Deps) (*catalog.Deps, error) {
	if given != nil {
		if _, err := deps.ParseLock(given.Resolved); err != nil {
			return nil, fmt.Errorf("%w: the recorded dependencies: %v", ErrSnapshotUnusable, err)
		}
		return given, nil
	}
	b, err := readRequirements(filepath.Join(code, RequirementsFile))
	if err != nil || b == nil {
		return nil, err
	}
	end := s.deps.Begin()
	defer end()
	phase(ctx, "dependencies")
	reqs, l, built, err := s.deps.Prepare(ctx, b)
	if err != nil {
		return nil, depsErr(err)
	}
	if built {
		s.log.Info("dependency layer built", "layer", l.Digest[:12], "format", l.Format, "bytes", l.Bytes, "wheels", len(l.Lines), "build_ms", l.BuildMS)
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
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, RequirementsFile, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrInvalid, RequirementsFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, deps.MaxRequirementsBytes+1))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// layerOf is fn's dependency layer, checked: present, the image the
// function was created with (its SHA-256, hashed once per daemon process
// and again whenever the file's stamp changes). nil without one.
func (s *Service) layerOf(fn *catalog.Function) (*deps.Layer, error) {
	if fn.Deps == nil {
		return nil, nil
	}
	l, err := s.deps.Layers.Get(fn.Deps.Layer)
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

// attachDeps adds fn's layer to a VM's spec: the disk after the code disk,
// and the kernel parameter that tells the agent its file system.
func (s *Service) attachDeps(spec *vmm.Spec, fn *catalog.Function) {
	if fn.Deps == nil {
		return
	}
	spec.Disks = append(spec.Disks, vmm.Disk{Path: filepath.Join(s.deps.Layers.Dir(), fn.Deps.Layer, deps.ImageFile), ReadOnly: true})
	spec.Cmdline += " thaw.deps=" + fn.Deps.Format
}

// depsInput is the snapshot input naming fn's layer image.
func depsInput(fn *catalog.Function) *snapshot.Digest {
	if fn.Deps == nil {
		return nil
	}
	return &snapshot.Digest{SHA256: fn.Deps.LayerSHA256}
}

// checkDepsInput compares a snapshot's layer with the function's.
func checkDepsInput(m *snapshot.Manifest, fn *catalog.Function) error {
	got, want := m.Inputs.Deps, depsInput(fn)
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

// kickDepsGC asks the collection loop for a run (a function or snapshot
// went, a layer came).
func (s *Service) kickDepsGC() {
	select {
	case s.depsGC <- struct{}{}:
	default:
	}
}

// collectDepsLoop checks the host's Python for pip (saying at start if
// functions with a requirements.txt cannot be created), then runs a
// collection of the dependency cache whenever asked, until the daemon
// stops.
func (s *Service) collectDepsLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.stop; cancel() }()
	if err := s.deps.Resolver.CheckPython(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("functions with a requirements.txt cannot be created until this is fixed", "err", err)
	}
	for {
		select {
		case <-s.stop:
			return
		case <-s.depsGC:
			s.collectDeps(context.Background())
		}
	}
}

// collectDeps removes the least recently used wheels and unused layers
// beyond the budget. A layer is in use while a function names it or a
// snapshot was taken with it.
func (s *Service) collectDeps(ctx context.Context) {
	st, err := s.deps.Collect(func() (map[string]bool, error) { return s.layersInUse(ctx) })
	if errors.Is(err, deps.ErrBusy) {
		s.log.Debug("dependency cache collection postponed: a create or pull is adding to it")
		return
	}
	if err != nil {
		s.log.Warn("dependency cache collection", "err", err)
		return
	}
	if st.Layers > 0 || st.Wheels > 0 {
		s.log.Info("dependency cache collected", "layers", st.Layers, "wheels", st.Wheels, "freed_bytes", st.FreedBytes,
			"used_bytes", st.UsedBytes, "budget_bytes", st.BudgetBytes)
	}
}

// layersInUse are the digests of the layers functions and their versions
// that still have snapshots name, and of those whose image a snapshot's
// manifest names.
func (s *Service) layersInUse(ctx context.Context) (map[string]bool, error) {
	fns, err := s.db.ListFunctions(ctx)
	if err != nil {
		return nil, err
	}
	vers, err := s.db.ListVersions(ctx, "")
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
	snaps, err := s.db.ListSnapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		m, err := snapshot.ReadManifest(sn.Dir)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", sn.ID, err)
		}
		if m.Inputs.Deps == nil {
			continue
		}
		d, ok := bySHA[m.Inputs.Deps.SHA256]
		if !ok {
			return nil, fmt.Errorf("snapshot %s names a dependency layer no function has", sn.ID)
		}
		out[d] = true
	}
	return out, nil
}

// pushedLayer is fn's layer as a push carries it: its description and
// image file (nil without one).
func (s *Service) pushedLayer(fn *catalog.Function) (*registry.Layer, string, error) {
	l, err := s.layerOf(fn)
	if err != nil || l == nil {
		return nil, "", err
	}
	return &registry.Layer{Digest: l.Digest, Format: string(l.Format), Lines: l.Lines, SHA256: l.SHA256, Bytes: l.Bytes}, l.Path, nil
}

// pullLayer puts the dependency layer of a remote snapshot in the layer
// store, unless it is here: fetched whole through the chunk cache, then
// adopted (its size, SHA-256 and digest checked). Lazy pulls fetch it too:
// the guest reads it as a disk.
func (s *Service) pullLayer(ctx context.Context, rm *registry.RemoteManifest) error {
	want := rm.Layer
	if want == nil {
		return nil
	}
	if have, err := s.deps.Layers.Get(want.Digest); err == nil {
		if have.SHA256 != want.SHA256 {
			return fmt.Errorf("%w: snapshot %s: its dependency layer %.12s is another image than this node's", ErrSnapshotUnusable, rm.ID, want.Digest)
		}
		return nil
	}
	phase(ctx, "dependency layer")
	tmp, err := os.MkdirTemp(s.deps.Layers.Dir(), ".tmp-pull-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	img := filepath.Join(tmp, deps.ImageFile)
	if err := s.reg.ChunkCache().PullFile(ctx, rm, registry.LayerPath, img, nil); err != nil {
		return registryErr(err)
	}
	if _, err := s.deps.Layers.Adopt(img, deps.Layer{Digest: want.Digest, Format: deps.Format(want.Format), Lines: want.Lines,
		SHA256: want.SHA256, Bytes: want.Bytes, BuiltAt: time.Now().UTC()}); err != nil {
		return fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, rm.ID, err)
	}
	s.log.Info("dependency layer pulled", "layer", want.Digest[:12], "snapshot", rm.ID, "bytes", want.Bytes)
	return nil
}

// catalogDeps is a function's deps from its registry record.
func catalogDeps(d *registry.FunctionDeps) *catalog.Deps {
	if d == nil {
		return nil
	}
	return &catalog.Deps{Requested: d.Requested, Resolved: d.Lines, Layer: d.Digest, LayerSHA256: d.SHA256,
		LayerBytes: d.Bytes, Format: d.Format}
}
