// Package registry keeps thaw snapshots in an object store (objstore.Store:
// an S3-compatible bucket, or a directory the nodes share) and fetches
// them back through a verified local chunk cache.
//
// A snapshot directory's files are cut into fixed-size chunks (Config's
// ChunkSize, DefaultChunkSize), named by the SHA-256 of their bytes and
// stored zstd-compressed under chunks/<aa>/<sha256>, once for every
// snapshot that has them; all-zero chunks are not stored. The remote
// manifest, snapshots/<id>/manifest.json, embeds the snapshot's own
// manifest and lists each file's chunks; Store.Push writes it last, so a
// manifest is never visible without its chunks. docs/snapshot-format.md
// specifies the objects.
//
// Cache is the node's chunk cache. Cache.PullInto writes a whole snapshot
// (verified file by file); Cache.Open gives one file as a LazyFile for
// restoring from the registry without pulling first:
//
//	lf, err := cache.Open(ctx, remoteManifest, "memory")
//	defer lf.Close()           // unpins the file's chunks
//	done := lf.Prefetch(ctx, 0, loadingSetBytes) // background, 4 GETs at a time
//	n, err := lf.ReadAt(page, off)               // holes read as zeros
//
// ReadAt is safe for concurrent use. The first read of a chunk fetches it
// (concurrent readers of one chunk share one fetch), verifies it, writes
// it to the cache and opens it; every later read of that chunk is one
// pread on the open descriptor, with no allocation and no lock, which is
// what a userfaultfd handler serving page faults needs. The chunks of an
// open LazyFile are pinned: the cache's LRU eviction never removes them.
//
// Every chunk is verified (decompressed, hashed) before it is used or
// cached; a corrupt object is fetched again up to FetchAttempts times,
// then refused with ErrCorrupt. A store that does not answer is
// ErrUnavailable. The package knows nothing of HTTP or the daemon's
// catalog; internal/daemon drives it.
package registry
