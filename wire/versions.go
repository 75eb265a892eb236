package wire

import (
	"encoding/json"
	"time"
)

// Version is an immutable, numbered build of a function (a deploy makes
// one): its configuration as deployed, its newest snapshot and what the
// snapshot was made from.
type Version struct {
	Function string `json:"function"`
	Version  int    `json:"version"`
	// Digest identifies the content: code, dependencies, configuration,
	// guest image, kernel and machine. Deploying the same content again
	// returns this version.
	Digest string `json:"digest"`
	// Config is the function as this version runs it.
	Config Function `json:"config"`
	// Snapshot is the version's newest snapshot (cold starts restore it);
	// absent once collected.
	Snapshot string `json:"snapshot,omitempty"`
	// Aliases route to this version (with any weight).
	Aliases []string `json:"aliases,omitempty"`
	// Collected: retention deleted its snapshots (it was neither among the
	// function's newest versions nor an alias's target); deploy it again
	// to run it.
	Collected bool `json:"collected,omitempty"`
	// Build is what the version's snapshot was made from.
	Build     json.RawMessage `json:"build,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
}

// Route sends Weight percent of an alias's traffic to Version.
type Route struct {
	Version int `json:"version"`
	Weight  int `json:"weight"`
}

// Alias routes a function's invocations (NAME:ALIAS; NAME alone follows
// "live") to one version, or two by weight.
type Alias struct {
	Function string  `json:"function"`
	Name     string  `json:"name"`
	Routing  []Route `json:"routing"`
	// History lists the versions the alias mainly routed to before, oldest
	// first (what a rollback goes back to).
	History   []int     `json:"history,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// AliasRequest is PUT /v1/functions/{name}/aliases/{alias}: one route at
// weight 100, or two whose weights add up to 100.
type AliasRequest struct {
	Routing []Route `json:"routing"`
}

// RollbackRequest is POST /v1/functions/{name}/rollback: To, or (absent)
// the version live routed to before, else the newest earlier version with
// a snapshot.
type RollbackRequest struct {
	To int `json:"to,omitempty"`
}

// Rollback says where a rollback moved the live alias.
type Rollback struct {
	Function string  `json:"function"`
	From     int     `json:"from"`
	To       int     `json:"to"`
	MS       float64 `json:"ms"`
}

// DeployRequest is POST /v1/functions/{name}/deploy naming a directory on
// the daemon's host (an upload of the code as a tar.gz takes the same
// settings as query parameters). A setting left out keeps the function's
// current one (a new function: the daemon's default).
type DeployRequest struct {
	Directory      string   `json:"directory"`
	MemoryMiB      int      `json:"memory_mib,omitempty"`
	VCPUs          int      `json:"vcpus,omitempty"`
	Network        *Network `json:"network,omitempty"`
	MaxConcurrency int      `json:"max_concurrency,omitempty"`
	KeepAliveS     int      `json:"keep_alive_s,omitempty"`
	VMMPool        int      `json:"vmm_pool,omitempty"`
	VMMPoolTTLS    int      `json:"vmm_pool_ttl_s,omitempty"`
	// Env and Secrets are the function's environment and secret
	// references (as in CreateFunctionRequest); absent: the function's
	// current ones.
	Env     map[string]string `json:"env,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// NoPromote leaves the live alias where it is (a version to test, or
	// to shift traffic to by weight).
	NoPromote bool `json:"no_promote,omitempty"`
	// Prepare also builds the restore strategies' artifacts (reap, faasnap,
	// snapbpf) on a warm snapshot recorded with RecordEvent, as POST
	// /v1/functions/{name}/prepare does.
	Prepare     bool            `json:"prepare,omitempty"`
	RecordEvent json.RawMessage `json:"record_event,omitempty"`
}

// Deploy is what a deploy published: a new version, or the existing one
// that has the same content (Unchanged: nothing was built or moved).
type Deploy struct {
	Function  string `json:"function"`
	Version   int    `json:"version"`
	Digest    string `json:"digest"`
	Unchanged bool   `json:"unchanged,omitempty"`
	// Promoted: the live alias now routes to this version.
	Promoted bool `json:"promoted,omitempty"`
	// Snapshots are the version's snapshots made by this deploy (the
	// clean one, and the warm one of a prepare).
	Snapshots []string     `json:"snapshots,omitempty"`
	Timing    DeployTiming `json:"timing"`
}

// DeployTiming breaks a deploy down, in milliseconds.
type DeployTiming struct {
	BuildMS    float64 `json:"build_ms"`              // code disk and dependency layer
	BootMS     float64 `json:"boot_ms,omitempty"`     // VMM start to the handler imported
	SnapshotMS float64 `json:"snapshot_ms,omitempty"` // the clean snapshot
	PrepareMS  float64 `json:"prepare_ms,omitempty"`  // the strategies' artifacts (with prepare)
	TotalMS    float64 `json:"total_ms"`
}
