package wire

import "time"

// PullRequest is POST /v1/snapshots/pull: exactly one of Snapshot (an id
// pushed to the registry) and Function (its newest pushed snapshot).
type PullRequest struct {
	Snapshot string `json:"snapshot,omitempty"`
	Function string `json:"function,omitempty"`
	// Version, with Function, pulls that version of the function (its
	// signed version record), entered here under the same number; without
	// it, the function's newest pushed snapshot (and its version, if it
	// has one).
	Version int `json:"version,omitempty"`
	// Lazy pulls everything but the memory file, whose pages come from
	// the registry on demand (a lazy snapshot, Snapshot.Memory "remote").
	Lazy bool `json:"lazy,omitempty"`
}

// PushResult is what POST /v1/snapshots/{id}/push did.
type PushResult struct {
	Snapshot string `json:"snapshot"`
	Function string `json:"function"`
	// Chunks are the snapshot's distinct non-zero chunks (the loading set
	// repeats memory's); Uploaded those the
	// registry did not hold yet (a resumed or deduplicated push uploads
	// fewer), UploadedBytes their compressed bytes.
	Chunks        int   `json:"chunks"`
	Uploaded      int   `json:"uploaded"`
	UploadedBytes int64 `json:"uploaded_bytes"`
	// StoredBytes and DataBytes are the compressed and uncompressed bytes
	// of the snapshot's distinct chunks.
	StoredBytes int64   `json:"stored_bytes"`
	DataBytes   int64   `json:"data_bytes"`
	ChunkSize   int64   `json:"chunk_size"`
	PushMS      float64 `json:"push_ms"`
}

// PullResult is what POST /v1/snapshots/pull did: the snapshot now in the
// catalog and what came from the registry.
type PullResult struct {
	Snapshot *Snapshot `json:"snapshot"`
	// FunctionCreated: the function was not on this node and was
	// registered from the registry's function record.
	FunctionCreated bool `json:"function_created,omitempty"`
	// Completed: the snapshot was here lazily and its memory was pulled
	// into place.
	Completed bool `json:"completed,omitempty"`
	// FetchedChunks and FetchedBytes (compressed) came from the registry;
	// CachedChunks were already in the node's chunk cache.
	FetchedChunks int64   `json:"fetched_chunks"`
	FetchedBytes  int64   `json:"fetched_bytes"`
	CachedChunks  int64   `json:"cached_chunks"`
	PullMS        float64 `json:"pull_ms"`
}

// RegistrySnapshot is a snapshot in the registry, as GET
// /v1/registry/snapshots lists it.
type RegistrySnapshot struct {
	ID        string    `json:"id"`
	Function  string    `json:"function"`
	CreatedAt time.Time `json:"created_at"`
	PushedAt  time.Time `json:"pushed_at"`
	// Chunks are its distinct non-zero chunks; StoredBytes and DataBytes
	// their compressed and uncompressed bytes (shared chunks count in
	// every snapshot that has them).
	Chunks      int   `json:"chunks"`
	StoredBytes int64 `json:"stored_bytes"`
	DataBytes   int64 `json:"data_bytes"`
	// Latest: the function's record names it, so a pull or import by
	// function gets it.
	Latest bool `json:"latest"`
	// SignedBy is the id of the key its manifest names as its signer
	// ("" when unsigned); Refused, if set, is why this node does not
	// trust it (then the fields above are what it claims, unverified,
	// and it is never imported here).
	SignedBy string `json:"signed_by,omitempty"`
	Refused  string `json:"refused,omitempty"`
}

// RegistryKey is a node's registry signing key as GET /v1/info shows it.
type RegistryKey struct {
	ID string `json:"id"` // what envelopes name it by
	// PublicKey is its line for other nodes' trusted keys
	// (thawd --registry-trusted-keys): "thaw-ed25519 BASE64".
	PublicKey string `json:"public_key"`
}

// GCRequest is POST /v1/registry/gc.
type GCRequest struct {
	// GraceS keeps unreferenced objects younger than this many seconds
	// (default 3600; 0 deletes every unreferenced object).
	GraceS *int `json:"grace_s,omitempty"`
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// GCResult is what a registry garbage collection found and did.
type GCResult struct {
	Snapshots     int   `json:"snapshots"`      // manifests read
	Functions     int   `json:"functions"`      // function records read
	Chunks        int   `json:"chunks"`         // chunk objects listed
	ChunksDeleted int   `json:"chunks_deleted"` // unreferenced and older than the grace
	ChunksYoung   int   `json:"chunks_young"`   // unreferenced, within the grace: kept
	CodeDeleted   int   `json:"code_deleted"`   // unreferenced code archives deleted
	StaleLeases   int   `json:"stale_leases"`   // leases of dead writers removed
	BytesDeleted  int64 `json:"bytes_deleted"`  // stored bytes deleted
	BytesKept     int64 `json:"bytes_kept"`     // stored bytes of what stays
	DryRun        bool  `json:"dry_run"`
	// WaitedMS is how long the collection waited for running pushes.
	WaitedMS float64 `json:"waited_ms"`
	GCMS     float64 `json:"gc_ms"`
}
