// Package inputs is the host side of the evaluation inputs: one
// deterministic generator per benchmark function, the Redis key scheme under
// which the inputs are stored, a manager for the host's redis-server and a
// loader that puts the generated inputs into it.
//
// FaaSnap (EuroSys'22, §6.1 and Table 2) gives every function two inputs, A
// (smaller) and B (larger, different content), kept in a Redis server on the
// host. The record phase uses one, the test phase the other; the input-size
// experiment (§6.3, Figure 8) records with A and tests with inputs of different
// content whose sizes are 1/4x to 4x A's. thaw does the same: guests reach the
// host's loopback at 10.0.2.2 (QEMU user networking), so a redis-server bound
// to 127.0.0.1 on the host is at 10.0.2.2:<port> for them (Redis.GuestAddr).
//
// # Variants and scale
//
// Generate(function, variant, scale) takes
//
//   - variant "A" or "B": the content. A and B come from different seeds, so
//     they are different pictures, documents, graphs, videos...
//   - scale: a size multiplier relative to input A (1 = A's size). It multiplies
//     the amount of data (bytes, pixels, cells, nodes, frames, matrix
//     elements), whatever the variant.
//
// So Table 2's A is Generate(f, "A", 1) and its B is Generate(f, "B",
// Spec.BScale) (NominalScale gives both), and Figure 8's test input for size
// ratio r is Generate(f, "B", r): different content, r times A's size.
// Note Generate(f, "B", 1) is B's content at A's size, not Table 2's B.
//
// The synthetic functions hello, read-list and mmap take the same parameters
// in both phases (as in the paper, whose Figure 7 runs them with identical
// inputs): their A and B are the same bytes and scale does not change them
// (Spec.Fixed). They are still stored in Redis so that every function's input
// is in one place; the stored JSON is the event their handlers take.
//
// # Formats
//
// What each function's handler (functions/<name>/handler.py) reads:
//
//   - image, recognition: a baseline JPEG (image/jpeg, quality 90);
//   - json: a JSON document of nested customer records;
//   - chameleon: JSON {"title", "header": [names], "rows": [[cells]]};
//   - pyaes, compression: ASCII English-like text;
//   - matmul: a numpy .npy array (2, n, n) of float64, the two matrices;
//   - ffmpeg: a YUV4MPEG2 (Y4M) 4:2:0 video, which ffmpeg reads natively;
//   - pagerank: a Barabási-Albert edge list, little-endian uint32 pairs;
//   - hello, read-list, mmap: small JSON parameter objects.
//
// A function fetches its input with the event Redis.Event(key):
// {"key": key, "redis": {"host": "10.0.2.2", "port": port}}.
//
// Keys are "thaw/<function>/<variant>/<scale>", scale printed with
// strconv.FormatFloat(scale, 'g', -1, 64): "thaw/image/A/1",
// "thaw/json/B/11.4", "thaw/pagerank/B/0.25".
//
// # Determinism
//
// Each (function, variant) pair seeds its own PCG (math/rand/v2) from an
// FNV-64a hash of "thaw/inputs/v1/<function>/<variant>"; only Uint64 of the
// PCG is used (the derived helpers are our own, so they cannot change under
// us), the pictures and videos are computed with integer arithmetic only (no
// floating-point rounding or FMA fusion differences between machines), and no
// map order or clock is involved. The same arguments give the same bytes on
// every run and machine with the same Go release; JPEG bytes also depend on
// image/jpeg's encoder, so they are pinned to the Go release (the decoded
// size is not). The seed does not depend on scale, so a larger scale extends
// the same stream (more records, frames, edges, text) and sizes grow
// monotonically with scale.
package inputs
