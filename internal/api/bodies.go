package api

import (
	"encoding/json"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// The catalog's rows as the API's bodies: the catalog keeps what the daemon
// needs (stamps, raw JSON), the API says what a user sees.

// FunctionBody is a function as the API answers it.
func FunctionBody(f *catalog.Function) *wire.Function {
	return &wire.Function{Name: f.Name, Digest: f.Digest, CodeDir: f.CodeDir, Disk: f.Disk, MemoryMiB: f.MemoryMiB,
		VCPUs: f.VCPUs, Network: wire.Network{Egress: f.Network.Egress, Services: f.Network.Services},
		MaxConcurrency: f.MaxConcurrency, KeepAliveS: f.KeepAliveS,
		VMMPool: f.VMMPool, VMMPoolTTLS: f.VMMPoolTTLS, CreatedAt: f.CreatedAt, Env: f.Env, Secrets: f.Secrets, Deps: depsBody(f.Deps)}
}

// SecretBody is a secret as the API answers it.
func SecretBody(i daemon.SecretInfo) wire.Secret {
	return wire.Secret{Name: i.Name, Version: i.Version, Digest: i.Digest, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}

func depsBody(d *catalog.Deps) *wire.FunctionDeps {
	if d == nil {
		return nil
	}
	return &wire.FunctionDeps{Requested: d.Requested, Resolved: d.Resolved, Layer: d.Layer,
		LayerSHA256: d.LayerSHA256, LayerBytes: d.LayerBytes, Format: d.Format}
}

// VersionBody is a function version as the API answers it.
func VersionBody(v *daemon.VersionInfo) *wire.Version {
	return &wire.Version{Function: v.Function, Version: v.Number, Digest: v.Digest, Config: *FunctionBody(&v.Config),
		Snapshot: v.Snapshot, Aliases: v.Aliases, Collected: v.Collected, Build: v.Inputs, CreatedAt: v.CreatedAt}
}

// AliasBody is an alias as the API answers it.
func AliasBody(a *catalog.Alias) *wire.Alias {
	out := &wire.Alias{Function: a.Function, Name: a.Name, History: a.History, UpdatedAt: a.UpdatedAt}
	_ = json.Unmarshal(a.Routing, &out.Routing) // the daemon wrote it
	return out
}

// Bodies maps rows to bodies.
func Bodies[R, B any](rows []R, body func(R) B) []B {
	out := make([]B, len(rows))
	for i, r := range rows {
		out[i] = body(r)
	}
	return out
}
