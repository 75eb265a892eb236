package regsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/codearchive"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// Versions through the registry: pushing a version's snapshot writes its
// signed version record (versions/<name>/<n>.json: number, content
// digest, configuration, code); a node that pulls it enters the version
// under the same number, so NAME:3 runs the same code on every node.
// Aliases stay each node's own, except that a node importing a function
// it never had points its live alias at the version imported.

// versionImport is the version a pull enters its snapshot under.
type versionImport struct {
	rec *registry.VersionRecord
	// builtCode: the pull unpacked the version's code into a directory of
	// its own (the function here has other code), removed if it fails.
	builtCode bool
}

// remoteRecord is the registry's record a pull by function starts from:
// the version asked for, or the function's newest snapshot (with its
// version, if it has one).
func (s *Sync) remoteRecord(ctx context.Context, req wire.PullRequest) (*registry.FunctionRecord, *versionImport, error) {
	if req.Version < 0 {
		return nil, nil, fmt.Errorf("%w: version %d", errdefs.ErrInvalid, req.Version)
	}
	if req.Version > 0 {
		vr, err := s.registry.GetVersion(ctx, req.Function, req.Version)
		if err != nil {
			return nil, nil, fmt.Errorf("version %s:%d: %w", req.Function, req.Version, Err(err))
		}
		return &vr.Function, &versionImport{rec: vr}, nil
	}
	rec, err := s.registry.GetFunction(ctx, req.Function)
	if err != nil {
		return nil, nil, Err(err)
	}
	if rec.Version == 0 {
		return rec, nil, nil
	}
	vr, err := s.registry.GetVersion(ctx, req.Function, rec.Version)
	if errors.Is(err, registry.ErrNotFound) {
		return rec, nil, nil // collected there since: the snapshot alone
	}
	if err != nil {
		return nil, nil, fmt.Errorf("version %s:%d: %w", req.Function, rec.Version, Err(err))
	}
	if !slices.Contains(vr.Snapshots, rec.Latest) {
		return rec, nil, nil
	}
	return rec, &versionImport{rec: vr}, nil
}

// versionConfig is the configuration a pulled version's snapshot restores
// with: the function just created from the version's record; the version
// already here with the same content; or, when the function here has
// other code, the version's own code unpacked and built beside it.
func (s *Sync) versionConfig(ctx context.Context, as *versionImport, fn *catalog.Function, created bool) (*catalog.Function, error) {
	vr := as.rec
	v, err := s.d.Catalog.GetVersion(ctx, fn.Name, vr.Number)
	switch {
	case err == nil && v.Digest != vr.Digest:
		return nil, fmt.Errorf("%w: version %s:%d here has other content than the registry's (was the function deployed on two nodes?)", errdefs.ErrConflict, fn.Name, vr.Number)
	case err == nil:
		return &v.Config, nil
	case !errors.Is(err, catalog.ErrNotFound):
		return nil, err
	case created || fn.Digest == vr.Function.Digest && sameSettings(fn, &vr.Function):
		return fn, nil
	}
	rec := &vr.Function
	code, err := s.registry.GetCode(ctx, rec)
	if err != nil {
		return nil, Err(err)
	}
	cfg, err := s.d.Functions().BuildFromRecord(ctx, fn.Name, rec, code)
	if err != nil {
		return nil, err
	}
	if cfg.Digest != rec.Digest {
		_ = os.RemoveAll(filepath.Dir(cfg.CodeDir))
		return nil, fmt.Errorf("%w: version %s:%d from the registry digests to %s, its record says %s", errdefs.ErrSnapshotUnusable, fn.Name, vr.Number, cfg.Digest[:12], rec.Digest[:12])
	}
	as.builtCode = true
	return cfg, nil
}

// sameSettings: fn here has the settings rec carries (its code compared
// apart).
func sameSettings(fn *catalog.Function, rec *registry.FunctionRecord) bool {
	a, _ := json.Marshal(functionRecord(fn))
	b, _ := json.Marshal(registry.FunctionRecord{Name: rec.Name, Digest: rec.Digest, MemoryMiB: rec.MemoryMiB,
		VCPUs: rec.VCPUs, Egress: rec.Egress, Services: rec.Services, MaxConcurrency: rec.MaxConcurrency,
		KeepAliveS: rec.KeepAliveS, VMMPool: rec.VMMPool, VMMPoolTTLS: rec.VMMPoolTTLS, Env: rec.Env, Secrets: rec.Secrets, Deps: rec.Deps})
	return bytes.Equal(a, b)
}

// enterVersion enters the pulled snapshot sn under the imported version
// (created here with the registry's number and digest if it is new), and
// points the live alias at it if the function has none.
func (s *Sync) enterVersion(ctx context.Context, as *versionImport, cfg *catalog.Function, sn *catalog.Snapshot) (*catalog.Snapshot, error) {
	inputs, _ := json.Marshal(s.d.BuildInputs(cfg))
	v := &catalog.Version{Function: cfg.Name, Number: as.rec.Number, Digest: as.rec.Digest, Config: *cfg, Inputs: inputs, CreatedAt: time.Now()}
	if err := s.d.Catalog.ImportVersion(context.WithoutCancel(ctx), v, []string{sn.ID}, versions.Live); err != nil {
		if errors.Is(err, catalog.ErrExists) {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrConflict, err)
		}
		return nil, err
	}
	s.log.Info("version imported", "function", cfg.Name, "version", v.Number, "snapshot", sn.ID)
	return s.d.Catalog.GetSnapshot(ctx, sn.ID)
}

// pushVersion writes the version record of snapshot sn (of a version):
// the version's configuration and code, and sn among its snapshots.
func (s *Sync) pushVersion(ctx context.Context, cfg *catalog.Function, sn *catalog.Snapshot, rm *registry.RemoteManifest) error {
	v, err := s.d.Catalog.GetVersion(ctx, sn.Function, sn.Version)
	if err != nil {
		return err
	}
	code, err := codearchive.Pack(filepath.Join(cfg.CodeDir, cfg.Name))
	if err != nil {
		return err
	}
	return s.registry.PushVersion(ctx, registry.VersionRecord{Number: v.Number, Digest: v.Digest,
		Function: functionRecord(cfg), Snapshots: []string{rm.ID}}, code)
}
