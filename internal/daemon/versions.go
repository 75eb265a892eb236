package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/thaw-dev/thaw/internal/catalog"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// Function versions and aliases are the component in package
// daemon/versions; this file wires it to the rest of the daemon and keeps
// its part of the Service's API.

// DefaultVersionKeep is how many of a function's newest versions keep
// their snapshots (besides every version an alias routes to).
const DefaultVersionKeep = dversions.DefaultKeep

// VersionInfo is a version with its newest snapshot and the aliases that
// route to it.
type VersionInfo = dversions.VersionInfo

// RollbackResult says where a rollback moved live from and to.
type RollbackResult = dversions.RollbackResult

// Target is what an invocation of a reference resolved to.
type Target = dversions.Target

// buildInputs is what a version's snapshot is made from besides its own
// code and settings.
type buildInputs = dversions.BuildInputs

// newVersions makes the versions component (in open, once the catalog is
// open); reg is the snapshot registry, nil if none is configured.
func (s *Service) newVersions(reg *registry.Store) *dversions.Manager {
	deps := dversions.Deps{Catalog: s.db, Log: s.log, Metrics: s.metrics,
		ValidName: ValidName, GetFunction: s.GetFunction, PublishVersion: s.functions.PublishVersion,
		Boot: s.vms.Boot, CreateSnapshot: s.CreateSnapshot, DeleteVM: s.DeleteVM, DeleteSnapshot: s.DeleteSnapshot,
		CheckPrepare: func(function string, recordEvent json.RawMessage) error {
			_, err := s.checkPrepareOptions(&PrepareRequest{Function: function, RecordEvent: recordEvent})
			return err
		},
		Prepare: s.prepareVersion, AutoPush: s.autoPush, BuildInputs: func() buildInputs { return s.buildInputs(nil) },
		StartOperation: func(ctx context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) error {
			_, err := s.startOperation(ctx, kind, target, work)
			return err
		},
		Phase: phase, SubProgress: subProgress,
		TraceDeploy: func(ctx context.Context, function string) (context.Context, func(error)) {
			ctx, sp := s.span(ctx, SpanDeploy, AttrFunction.String(function))
			return ctx, func(err error) { endSpan(sp, err) }
		},
	}
	if reg != nil {
		deps.Registry = reg
	}
	return dversions.New(dversions.Config{Keep: s.cfg.VersionKeep}, deps)
}

// prepareVersion prepares a version's configuration (-1: a deploy's; a
// version's number: its rebuild).
func (s *Service) prepareVersion(ctx context.Context, fn *catalog.Function, version int, recordEvent json.RawMessage) (*PrepareResult, error) {
	req := PrepareRequest{Function: fn.Name, RecordEvent: recordEvent}
	timeout, err := s.checkPrepareOptions(&req)
	if err != nil {
		return nil, err
	}
	return s.prepareWith(ctx, req, timeout, fn, version)
}

func (s *Service) buildInputs(_ *catalog.Function) buildInputs {
	file := func(name string) string { return s.image.Files[name].SHA256 }
	return buildInputs{Image: s.image.Hash, Kernel: file(s.image.KernelFile()), Rootfs: file(guestimage.Rootfs),
		Initrd: file(guestimage.Initrd), Cmdline: s.image.Cmdline, Machine: s.cfg.VMM.MachineABI(),
		VMM: s.cfg.VMM.Name() + " " + s.vmmVersion, Accel: s.accel.Accel}
}

// ParseRef reads an invocation's or a command's NAME[:VERSION|:ALIAS].
func ParseRef(s string) (versions.Ref, error) {
	r, err := versions.ParseRef(s)
	if err != nil {
		return r, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := ValidName(r.Function); err != nil {
		return r, err
	}
	return r, nil
}

// ListVersions returns a function's versions, oldest first.
func (s *Service) ListVersions(ctx context.Context, function string) ([]*VersionInfo, error) {
	return s.versions.ListVersions(ctx, function)
}

// GetVersion returns one version of a function.
func (s *Service) GetVersion(ctx context.Context, function string, number int) (*catalog.Version, error) {
	return s.versions.GetVersion(ctx, function, number)
}

// GetVersionInfo returns one version of a function with its snapshot and
// aliases.
func (s *Service) GetVersionInfo(ctx context.Context, function string, number int) (*VersionInfo, error) {
	return s.versions.GetVersionInfo(ctx, function, number)
}

// ListAliases returns a function's aliases.
func (s *Service) ListAliases(ctx context.Context, function string) ([]*catalog.Alias, error) {
	return s.versions.ListAliases(ctx, function)
}

// GetAlias returns one alias of a function.
func (s *Service) GetAlias(ctx context.Context, function, name string) (*catalog.Alias, error) {
	return s.versions.GetAlias(ctx, function, name)
}

// SetAlias routes an alias of a function to one version, or two by
// weight; it creates the alias if needed.
func (s *Service) SetAlias(ctx context.Context, function, name string, routing versions.Routing) (*catalog.Alias, error) {
	return s.versions.SetAlias(ctx, function, name, routing)
}

// DeleteAlias removes an alias of a function (live is kept while the
// function has versions).
func (s *Service) DeleteAlias(ctx context.Context, function, name string) error {
	return s.versions.DeleteAlias(ctx, function, name)
}

// Rollback moves a function's live alias to version to (0: the version
// live pointed to before, or the newest earlier one with a snapshot).
func (s *Service) Rollback(ctx context.Context, function string, to int) (*RollbackResult, error) {
	return s.versions.Rollback(ctx, function, to)
}
