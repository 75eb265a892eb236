package wire

// PullRequest is POST /v1/snapshots/pull: exactly one of Snapshot (an id
// pushed to the registry) and Function (its newest pushed snapshot).
type PullRequest struct {
	Snapshot string `json:"snapshot,omitempty"`
	Function string `json:"function,omitempty"`
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
