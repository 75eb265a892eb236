package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/chunk"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

func (a *app) newBenchChunksCmd() *cobra.Command {
	var (
		sizes   []string
		out     string
		fromDir string
	)
	cmd := &cobra.Command{
		Use:   "chunks [SNAPSHOT_DIR...]",
		Short: "What a set of snapshots costs in the registry at several chunk sizes",
		Long: `Chunks every file of the given snapshot directories as 'thaw snapshot push'
would (fixed-size chunks, all-zero chunks left out, named by SHA-256, zstd)
at each --sizes and prints, per size, the bytes and objects the store would
hold and the deduplication across the snapshots. --snapshots-dir takes, in a
data directory's snapshots/, the newest prepared snapshot (one with strategy
artifacts) of every function. Reads the files directly: needs no daemon, but
read access to the snapshots (root). --out writes DIR/chunks.json and
DIR/chunks.md.`,
		Example: `  thaw bench chunks --snapshots-dir /var/lib/thaw/snapshots --out docs/results/chunks-20261124
  thaw bench chunks /var/lib/thaw/snapshots/snap-1 /var/lib/thaw/snapshots/snap-2 --sizes 64KiB`,
		RunE: func(cmd *cobra.Command, args []string) error {
			dirs := args
			if fromDir != "" {
				found, err := preparedSnapshots(fromDir)
				if err != nil {
					return err
				}
				dirs = append(dirs, found...)
			}
			if len(dirs) == 0 {
				return cli.Usagef("give snapshot directories or --snapshots-dir")
			}
			var cs []int64
			for _, s := range sizes {
				n, err := parseChunkSize(s)
				if err != nil {
					return cli.Usagef("--sizes: %v", err)
				}
				cs = append(cs, n)
			}
			res, err := a.measureChunks(dirs, cs)
			if err != nil {
				return err
			}
			md := res.markdown()
			if out != "" {
				if err := writeChunkReport(out, res, md); err != nil {
					return err
				}
			}
			if a.JSON {
				return a.PrintJSON(res)
			}
			_, err = fmt.Fprint(a.Stdout, md)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&sizes, "sizes", []string{"64KiB", "512KiB", "2MiB"}, "chunk sizes (powers of two, 64KiB to 8MiB)")
	fl.StringVar(&out, "out", "", "directory to write chunks.json and chunks.md into")
	fl.StringVar(&fromDir, "snapshots-dir", "", "a data directory's snapshots/: measure the newest prepared snapshot of each function")
	return cmd
}

// measureChunks chunks the snapshots in dirs at each of sizes.
func (a *app) measureChunks(dirs []string, sizes []int64) (chunkReport, error) {
	var res chunkReport
	for _, d := range dirs {
		m, err := snapshot.ReadManifest(d)
		if err != nil {
			return res, err
		}
		res.Snapshots = append(res.Snapshots, chunkSnapshot{ID: m.ID, Function: m.Function, MemoryMiB: m.Guest.MemoryMiB})
	}
	for _, n := range sizes {
		fmt.Fprintf(a.Stderr, "chunking %d snapshots at %s\n", len(dirs), output.FmtBytes(n))
		m, err := chunk.MeasureSnapshots(dirs, n, prefetchedPages)
		if err != nil {
			return res, err
		}
		res.Sizes = append(res.Sizes, *m)
	}
	return res, nil
}

// writeChunkReport writes out/chunks.json and out/chunks.md.
func writeChunkReport(out string, res chunkReport, md string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "chunks.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "chunks.md"), []byte(md), 0o644)
}

type chunkSnapshot struct {
	ID        string `json:"id"`
	Function  string `json:"function"`
	MemoryMiB int    `json:"memory_mib"`
}

type chunkReport struct {
	Snapshots []chunkSnapshot `json:"snapshots"`
	Sizes     []chunk.Measure `json:"sizes"`
}

func (r chunkReport) markdown() string {
	var b strings.Builder
	fns := make([]string, len(r.Snapshots))
	for i, s := range r.Snapshots {
		fns[i] = fmt.Sprintf("%s (%d MiB)", s.Function, s.MemoryMiB)
	}
	fmt.Fprintf(&b, "# Registry chunk sizes\n\n%d snapshots: %s.\n\n", len(r.Snapshots), strings.Join(fns, ", "))
	b.WriteString("| chunk size | non-zero chunks | their bytes | objects stored | unique bytes | stored (zstd) | dedup ratio | mean snapshot non-zero | stored / one snapshot | lazy working set: GETs per snapshot | fetched / working set |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range r.Sizes {
		gets, amp := 0.0, 0.0
		if m.WorkingSetSnapshots > 0 && m.WorkingSetBytes > 0 {
			gets = float64(m.WorkingSetChunks) / float64(m.WorkingSetSnapshots)
			amp = float64(m.WorkingSetFetchBytes) / float64(m.WorkingSetBytes)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %s | %s | %.2fx | %s | %.2fx | %.0f | %.1fx |\n", output.FmtBytes(m.ChunkSize), m.Chunks,
			output.FmtBytes(m.ChunkBytes), m.Objects, output.FmtBytes(m.UniqueBytes), output.FmtBytes(m.StoredBytes), m.DedupRatio,
			output.FmtBytes(m.MeanSnapshotBytes), m.StoredPerSnapshot, gets, amp)
	}
	b.WriteString("\nObjects are the distinct chunks plus one remote manifest per snapshot. The dedup ratio is the non-zero chunk bytes of all snapshots over the distinct chunks' bytes. \"Stored / one snapshot\" is what the bucket holds for all of them over one snapshot's non-zero bytes (counted in 4 KiB pages, the mean over the snapshots). The last two columns are a lazy restore that fetches only the chunks holding the REAP working set (recorded by prepare): chunk GETs per snapshot and the bytes those chunks hold over the working set's bytes.\n")
	return b.String()
}

// parseChunkSize reads 64KiB, 2MiB or a number of bytes.
func parseChunkSize(s string) (int64, error) {
	mult := int64(1)
	t := strings.TrimSpace(s)
	for suf, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "K": 1 << 10, "M": 1 << 20} {
		if strings.HasSuffix(t, suf) && mult == 1 {
			mult, t = m, strings.TrimSuffix(t, suf)
		}
	}
	var n int64
	if _, err := fmt.Sscan(t, &n); err != nil || n <= 0 {
		return 0, fmt.Errorf("chunk size %q: want e.g. 64KiB, 2MiB or bytes", s)
	}
	n *= mult
	if n < registry.MinChunkSize || n > registry.MaxChunkSize || n&(n-1) != 0 {
		return 0, fmt.Errorf("chunk size %q: a power of two from 64KiB to 8MiB", s)
	}
	return n, nil
}

// preparedSnapshots returns, per function, the newest snapshot directory in
// dir that has strategy artifacts, ordered by function.
func preparedSnapshots(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	newest := map[string]*snapshot.Manifest{}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		d := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(d, "strategies")); err != nil {
			continue
		}
		m, err := snapshot.ReadManifest(d)
		if err != nil {
			continue
		}
		if o := newest[m.Function]; o == nil || m.CreatedAt.After(o.CreatedAt) {
			newest[m.Function] = m
		}
	}
	var out []string
	for _, m := range newest {
		out = append(out, filepath.Join(dir, m.ID))
	}
	sort.Strings(out)
	return out, nil
}

// prefetchedPages lists the memory pages a lazy restore of the snapshot in
// snapDir with the remote default strategy fetches before the guest runs
// (its Prefetched, on its artifact directory); an error wrapping
// os.ErrNotExist when it has none there.
func prefetchedPages(snapDir string) (int64, [][2]int64, error) {
	st, ok := restore.Lookup(restore.RemoteDefault())
	if !ok || st.Prefetched == nil {
		return 0, nil, fmt.Errorf("strategy %s: no prefetched pages: %w", st.Kind, os.ErrNotExist)
	}
	return st.Prefetched(restore.Snapshot{Dir: snapDir}.ArtifactDir(st.Kind))
}
