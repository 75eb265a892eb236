package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/thaw-dev/thaw/internal/catalog"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
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

// Deploy creates or updates a function and publishes an immutable version
// of it in one step (versions.Manager.Deploy): build, boot, snapshot,
// publish, and move the live alias unless NoPromote.
func (s *Service) Deploy(ctx context.Context, spec DeploySpec) (*DeployResult, error) {
	return s.versions.Deploy(ctx, s.deployRequest(spec))
}

// StartDeploy runs a deploy as an operation; the code is read before it
// answers.
func (s *Service) StartDeploy(ctx context.Context, spec DeploySpec) (*Operation, error) {
	d, err := s.versions.BeginDeploy(ctx, s.deployRequest(spec))
	if err != nil {
		return nil, err
	}
	op, err := s.startOperation(ctx, wire.OpDeploy, spec.Name, func(ctx context.Context) (*wire.OperationResult, error) {
		res, err := d.Run(ctx)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Deploy: res}, nil
	})
	if err != nil {
		d.Discard()
		return nil, err
	}
	return op, nil
}

// deployRequest is spec for the versions component: the function's code
// and settings are staged here, when the deploy begins.
func (s *Service) deployRequest(spec DeploySpec) dversions.DeployRequest {
	return dversions.DeployRequest{Name: spec.Name, NoPromote: spec.NoPromote, Prepare: spec.Prepare, RecordEvent: spec.RecordEvent,
		Stage: func(ctx context.Context, prev *catalog.Function) (dversions.Code, error) {
			c, err := s.stageDeploy(ctx, spec.FunctionSpec, prev)
			if err != nil {
				return nil, err
			}
			return c, nil
		}}
}

// stagedCode is a deploy's function with its code staged.
type stagedCode struct {
	s       *Service
	spec    FunctionSpec
	staging string // the staged code; removed when the deploy ends
	release func() // the name's reservation
}

// stageDeploy fills the settings spec left out from the function's
// current configuration, checks them, reserves the name and stages the
// code (reading an upload while its request lasts).
func (s *Service) stageDeploy(ctx context.Context, spec FunctionSpec, prev *catalog.Function) (*stagedCode, error) {
	inheritSettings(&spec, prev)
	if _, err := s.functions.CheckSpec(&spec); err != nil {
		return nil, err
	}
	c := &stagedCode{s: s, spec: spec}
	var err error
	if c.release, err = s.claimName(spec.Name); err != nil {
		return nil, err
	}
	if c.staging, err = s.functions.StageCode(ctx, spec); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// Build checks the function's settings again and builds its code's disk
// and dependency layer, which stays until done.
func (c *stagedCode) Build(ctx context.Context) (*catalog.Function, func(), error) {
	s := c.s
	netw, err := s.functions.CheckSpec(&c.spec)
	if err != nil {
		return nil, nil, err
	}
	endDeps := s.functions.Deps().Begin()
	done := func() { endDeps(); s.functions.KickDepsGC() }
	cfg, err := s.functions.BuildFunction(ctx, c.spec, netw, c.staging)
	if err != nil {
		done()
		return nil, nil, err
	}
	return cfg, done, nil
}

// Discard removes the staged code and releases the name.
func (c *stagedCode) Discard() {
	os.RemoveAll(c.staging)
	c.release()
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
