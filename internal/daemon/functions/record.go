package functions

import (
	"bytes"
	"context"
	"os"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// SpecOfRecord is the spec of function name from a registry record and
// its code (a tar.gz archive).
func SpecOfRecord(name string, rec *registry.FunctionRecord, code []byte) Spec {
	return Spec{Name: name, Archive: bytes.NewReader(code), MemoryMiB: rec.MemoryMiB,
		VCPUs: rec.VCPUs, Network: vmnet.Policy{Egress: vmnet.Egress(rec.Egress), Services: rec.Services},
		MaxConcurrency: rec.MaxConcurrency, KeepAliveS: rec.KeepAliveS, VMMPool: rec.VMMPool, VMMPoolTTLS: rec.VMMPoolTTLS,
		Env: rec.Env, Secrets: rec.Secrets, Deps: CatalogDeps(rec.Deps)}
}

// CreateFromRecord creates function name from a registry record and its
// code (CreateFunction).
func (m *Manager) CreateFromRecord(ctx context.Context, name string, rec *registry.FunctionRecord, code []byte) (*catalog.Function, error) {
	return m.CreateFunction(ctx, SpecOfRecord(name, rec, code))
}

// BuildFromRecord builds a version's configuration and code from its
// registry record beside the function's own, entering nothing in the
// catalog.
func (m *Manager) BuildFromRecord(ctx context.Context, name string, rec *registry.FunctionRecord, code []byte) (*catalog.Function, error) {
	spec := SpecOfRecord(name, rec, code)
	netw, err := m.CheckSpec(&spec)
	if err != nil {
		return nil, err
	}
	staging, err := m.StageCode(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	return m.BuildFunction(ctx, spec, netw, staging)
}
