package daemon

import (
	"context"
	"encoding/json"

	"github.com/thaw-dev/thaw/internal/catalog"
	dversions "github.com/thaw-dev/thaw/internal/daemon/versions"
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
// and settings are staged by the functions component, when the deploy
// begins, under a claim on the name (package lifecycle).
func (s *Service) deployRequest(spec DeploySpec) dversions.DeployRequest {
	return dversions.DeployRequest{Name: spec.Name, NoPromote: spec.NoPromote, Prepare: spec.Prepare, RecordEvent: spec.RecordEvent,
		Stage: func(ctx context.Context, prev *catalog.Function) (dversions.Code, error) {
			c, err := s.functions.StageDeploy(ctx, spec.FunctionSpec, prev, s.lifecycle.ClaimDeploy)
			if err != nil {
				return nil, err
			}
			return c, nil
		}}
}
