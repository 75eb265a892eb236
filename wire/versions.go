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
