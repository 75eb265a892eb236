package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// The remote-restore experiment: a function prepared on one node and
// pushed to the registry is restored on a node that has never seen it,
// over the emulated link to the object store: lazily (the invocation
// imports it and fetches memory pages on demand), or after a full pull;
// against a cold restore from the local disk on the preparing node.
const (
	RemoteLocal = "local" // cold restore on the preparing node, page cache evicted
	RemoteLazy  = "lazy"  // a fresh node's first invocation: import, lazy restore
	RemotePull  = "pull"  // a fresh node: full pull, then a cold restore
)

// RemoteConfig configures a remote-restore run.
type RemoteConfig struct {
	Cases []FunctionCase `json:"cases"`
	Reps  int            `json:"reps"`
	// Lazy are the strategies restored lazily from the registry.
	Lazy []string `json:"lazy"`
	// Link describes the emulated link (and its measurement), for the
	// report.
	Link    json.RawMessage               `json:"link,omitempty"`
	Timeout time.Duration                 `json:"-"`
	Sink    io.Writer                     `json:"-"` // every sample as a JSON line
	Say     func(format string, a ...any) `json:"-"`
}

// DefaultRemoteCases are hello, json and image at 512 MiB (the
// evaluation's guests), recorded with one input and tested with another.
func DefaultRemoteCases(root string) []FunctionCase {
	return []FunctionCase{
		functionCase(root, "hello", 512, `{"name":"record"}`, `{"name":"test"}`),
		functionCase(root, "json", 512, `{"records":3000,"seed":1}`, `{"records":3000,"seed":2}`),
		functionCase(root, "image", 512, `{"size":512,"seed":1}`, `{"size":640,"seed":2}`),
	}
}

// RemoteNodes are the experiment's two nodes.
type RemoteNodes struct {
	Owner *client.Client // prepares and pushes; restores from its disk
	// Fresh restarts the restoring node with an empty data directory (no
	// function, snapshot or cached chunk) and returns a client for it.
	Fresh func(ctx context.Context) (*client.Client, error)
	// Fetched reads the restoring node's counters of what its chunk cache
	// fetched from the registry since it started.
	Fetched func(ctx context.Context) (bytes, chunks int64, err error)
}

// RemoteSample is one cold restore (one JSON line).
type RemoteSample struct {
	Function string `json:"function"`
	Kind     string `json:"kind"`
	Strategy string `json:"strategy"`
	Rep      int    `json:"rep"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	// FirstAnswerMS is what the client waited: from the request (the pull's,
	// for pull) to the invocation's answer.
	FirstAnswerMS float64 `json:"first_answer_ms"`
	PullMS        float64 `json:"pull_ms,omitempty"`   // pull: the full pull, client side
	ImportMS      float64 `json:"import_ms,omitempty"` // lazy: timing.import_ms
	TotalMS       float64 `json:"total_ms"`            // the invocation's timing.total_ms
	SetupMS       float64 `json:"setup_ms"`
	ResumeMS      float64 `json:"resume_ms"`
	InvokeMS      float64 `json:"invoke_ms"`
	Source        string  `json:"source,omitempty"` // timing.restore.source
	// FetchedBytes and FetchedChunks: everything the node fetched from the
	// registry for this first answer (compressed): the import or pull and
	// the restore's page fetches.
	FetchedBytes  int64 `json:"fetched_bytes"`
	FetchedChunks int64 `json:"fetched_chunks"`
	// SourceFetchedBytes: the part the restore fetched on demand
	// (strategy_stats.source_fetched_bytes); SourceBytes what its page
	// reads returned (uncompressed).
	SourceFetchedBytes uint64 `json:"source_fetched_bytes,omitempty"`
	SourceBytes        uint64 `json:"source_bytes,omitempty"`
	// Restore and Stats are the invocation's timing.restore and
	// strategy_stats as answered: where the time and the fetches went.
	Restore *client.RestoreTiming `json:"restore,omitempty"`
	Stats   *client.StrategyStats `json:"strategy_stats,omitempty"`
}

// RemotePrepared is one function's prepare and push.
type RemotePrepared struct {
	Function        string             `json:"function"`
	Snapshot        string             `json:"snapshot"`
	PrepareMS       float64            `json:"prepare_ms"`
	LoadingSetBytes int64              `json:"loading_set_bytes"` // FaaSnap's loading set
	WorkingSetPages int                `json:"working_set_pages"`
	Push            *client.PushResult `json:"push"`
	PushWallMS      float64            `json:"push_wall_ms"`
}

// RemoteResult is a whole run.
type RemoteResult struct {
	Machine  Machine          `json:"machine"`
	When     time.Time        `json:"when"`
	Config   RemoteConfig     `json:"config"`
	Prepared []RemotePrepared `json:"prepared"`
	Samples  []RemoteSample   `json:"samples"`
}

// RunRemote runs the experiment: per function, prepare and push on the
// owner, then Reps rounds of: a local cold vanilla restore on the owner;
// per lazy strategy, a fresh node's first invocation; a fresh node's full
// pull and cold vanilla restore.
func RunRemote(ctx context.Context, nodes RemoteNodes, cfg RemoteConfig) (*RemoteResult, error) {
	if cfg.Reps < 1 || len(cfg.Cases) == 0 {
		return nil, errors.New("remote: want at least one function and one repetition")
	}
	say := cfg.Say
	if say == nil {
		say = func(string, ...any) {}
	}
	info, err := nodes.Owner.Info(ctx)
	if err != nil {
		return nil, err
	}
	res := &RemoteResult{Machine: DescribeMachine(info), When: time.Now().UTC(), Config: cfg}
	emit := func(s RemoteSample) {
		res.Samples = append(res.Samples, s)
		if cfg.Sink != nil {
			b, _ := json.Marshal(s)
			fmt.Fprintf(cfg.Sink, "%s\n", b)
		}
		say("%s %s %s rep %d: first answer %.0f ms (total %.0f ms), fetched %.1f MiB %s", s.Function, s.Kind, s.Strategy, s.Rep,
			s.FirstAnswerMS, s.TotalMS, float64(s.FetchedBytes)/(1<<20), termtext.Line(s.Error))
	}
	for _, fc := range cfg.Cases {
		p, err := prepareAndPush(ctx, nodes.Owner, fc, say)
		if err != nil {
			return res, err
		}
		res.Prepared = append(res.Prepared, *p)
		for rep := 1; rep <= cfg.Reps; rep++ {
			emit(localCold(ctx, nodes.Owner, fc, p.Snapshot, rep, cfg.Timeout))
			for _, st := range cfg.Lazy {
				s, err := freshRestore(ctx, nodes, fc, p.Snapshot, RemoteLazy, st, rep, cfg.Timeout)
				if err != nil {
					return res, err
				}
				emit(s)
			}
			s, err := freshRestore(ctx, nodes, fc, p.Snapshot, RemotePull, "vanilla", rep, cfg.Timeout)
			if err != nil {
				return res, err
			}
			emit(s)
		}
	}
	return res, nil
}

func prepareAndPush(ctx context.Context, c *client.Client, fc FunctionCase, say func(string, ...any)) (*RemotePrepared, error) {
	t0 := time.Now()
	pr, err := prepareCase(ctx, c, fc, say, "prepare")
	if err != nil {
		return nil, err
	}
	p := &RemotePrepared{Function: fc.Name, Snapshot: pr.Warm.ID, PrepareMS: msSince(t0)}
	var ls struct {
		LoadingSetBytes int64 `json:"loading_set_bytes"`
		WorkingSetPages int   `json:"working_set_pages"`
	}
	for _, k := range slices.Sorted(maps.Keys(pr.Prepared)) { // the strategy that builds a loading set
		if pr.BuildAs(k, &ls) && ls.LoadingSetBytes > 0 {
			p.LoadingSetBytes, p.WorkingSetPages = ls.LoadingSetBytes, ls.WorkingSetPages
			break
		}
	}
	say("%s: push %s", fc.Name, p.Snapshot)
	t0 = time.Now()
	if p.Push, err = c.PushSnapshot(ctx, p.Snapshot); err != nil {
		return nil, fmt.Errorf("push %s: %w", fc.Name, err)
	}
	p.PushWallMS = msSince(t0)
	return p, nil
}

// localCold is a cold vanilla restore of the warm snapshot from the
// owner's disk, page cache evicted: the baseline.
func localCold(ctx context.Context, c *client.Client, fc FunctionCase, snap string, rep int, timeout time.Duration) RemoteSample {
	s := RemoteSample{Function: fc.Name, Kind: RemoteLocal, Strategy: "vanilla", Rep: rep}
	t0 := time.Now()
	inv, err := c.InvokeSnapshot(ctx, snap, fc.TestEvent, client.InvokeOptions{Strategy: "vanilla", EvictCache: true, Timeout: timeout})
	s.FirstAnswerMS = msSince(t0)
	s.fill(inv, err)
	return s
}

// freshRestore is a first answer on a node that has never seen the
// function: lazy (its invocation imports it) or after a full pull. Only a
// failure to get a fresh node ends the run; a failed restore is a sample.
func freshRestore(ctx context.Context, nodes RemoteNodes, fc FunctionCase, snap, kind, strategy string, rep int, timeout time.Duration) (RemoteSample, error) {
	s := RemoteSample{Function: fc.Name, Kind: kind, Strategy: strategy, Rep: rep}
	c, err := nodes.Fresh(ctx)
	if err != nil {
		return s, fmt.Errorf("fresh node: %w", err)
	}
	o := client.InvokeOptions{Strategy: strategy, EvictCache: true, Timeout: timeout}
	t0 := time.Now()
	var inv *client.Invocation
	if kind == RemotePull {
		if _, err = c.PullSnapshot(ctx, client.PullRequest{Function: fc.Name}); err == nil {
			s.PullMS = msSince(t0)
			inv, err = c.InvokeSnapshot(ctx, snap, fc.TestEvent, o)
		}
	} else {
		inv, err = c.InvokeFunction(ctx, fc.Name, fc.TestEvent, o)
	}
	s.FirstAnswerMS = msSince(t0)
	s.fill(inv, err)
	if s.FetchedBytes, s.FetchedChunks, err = nodes.Fetched(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// fill copies an invocation's outcome into the sample.
func (s *RemoteSample) fill(inv *client.Invocation, err error) {
	switch {
	case err != nil:
		s.Error = err.Error()
		return
	case !inv.OK:
		s.Error = "the function failed"
		if inv.Error != nil {
			s.Error = inv.Error.Error()
		}
		return
	case inv.Mode != "cold":
		s.Error = "not a cold restore: " + inv.Mode
		return
	}
	s.OK = true
	t := inv.Timing
	s.TotalMS, s.InvokeMS, s.ImportMS = t.TotalMS, t.InvokeMS, t.ImportMS
	if r := t.Restore; r != nil {
		s.SetupMS, s.ResumeMS, s.Source = r.SetupMS, r.ResumeMS, r.Source
	}
	// TotalMS is the restore alone here: the daemon's total includes the
	// import, which is reported apart.
	s.TotalMS -= s.ImportMS
	if st := inv.StrategyStats; st != nil {
		s.SourceFetchedBytes, s.SourceBytes = st.SourceFetchedBytes, st.SourceBytes
	}
	s.Restore, s.Stats = t.Restore, inv.StrategyStats
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// remoteGroup is the samples of one function, kind and strategy.
type remoteGroup struct {
	function, kind, strategy string
	ok, n                    int
	// cold is the import and the restore: import_ms + total_ms
	first, imp, total, cold, fetched Summary
	onDemand                         Summary // source_fetched_bytes
	chunks                           Summary // fetched chunks
}

func (r *RemoteResult) groups() []remoteGroup {
	var out []remoteGroup
	idx := map[string]int{}
	var first, imp, total, cold, fetched, onDemand, chunks [][]float64
	for _, s := range r.Samples {
		k := s.Function + "/" + s.Kind + "/" + s.Strategy
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, remoteGroup{function: s.Function, kind: s.Kind, strategy: s.Strategy})
			first, imp, total, cold, fetched = append(first, nil), append(imp, nil), append(total, nil), append(cold, nil), append(fetched, nil)
			onDemand, chunks = append(onDemand, nil), append(chunks, nil)
		}
		out[i].n++
		if s.OK {
			out[i].ok++
			first[i] = append(first[i], s.FirstAnswerMS)
			total[i] = append(total[i], s.TotalMS)
			imp[i] = append(imp[i], s.ImportMS)
			cold[i] = append(cold[i], s.ImportMS+s.TotalMS)
			fetched[i] = append(fetched[i], float64(s.FetchedBytes))
			onDemand[i] = append(onDemand[i], float64(s.SourceFetchedBytes))
			chunks[i] = append(chunks[i], float64(s.FetchedChunks))
		}
	}
	for i := range out {
		out[i].first, out[i].imp, out[i].total = Summarize(first[i]), Summarize(imp[i]), Summarize(total[i])
		out[i].cold, out[i].fetched, out[i].onDemand = Summarize(cold[i]), Summarize(fetched[i]), Summarize(onDemand[i])
		out[i].chunks = Summarize(chunks[i])
	}
	return out
}

func (r *RemoteResult) group(fn, kind, strategy string) (remoteGroup, bool) {
	for _, g := range r.groups() {
		if g.function == fn && g.kind == kind && g.strategy == strategy {
			return g, true
		}
	}
	return remoteGroup{}, false
}

// Targets of the experiment.
const (
	TargetFetchedOverLoadingSet = 1.3 // bytes fetched for a lazy cold restore / FaaSnap's loading set
	TargetLazyOverLocal         = 2.0 // hello: lazy cold total / local vanilla cold total
)

// Markdown renders the run: machine, link, prepare and push, one row per
// function, kind and strategy, and the targets.
func (r *RemoteResult) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores, %d GiB, %s, kernel %s, disk %s; QEMU %s, accelerator **%s**, %s. %s.\n\n",
		m.Cores, m.MemoryGiB, m.CPU, m.Kernel, m.Disk, m.QEMU, m.Accel, m.HintText(), r.When.Format("2006-01-02 15:04 UTC"))
	var link struct {
		Link                 string
		RTT, Added, Get, Put float64
	}
	var lc map[string]any
	if json.Unmarshal(r.Config.Link, &lc) == nil {
		link.Link, _ = lc["link"].(string)
		link.RTT, _ = lc["rtt_median_ms"].(float64)
		link.Added, _ = lc["added_ms"].(float64)
		link.Get, _ = lc["get_mbit_s"].(float64)
		link.Put, _ = lc["put_mbit_s"].(float64)
		fmt.Fprintf(&b, "Link between the nodes and the object store (MinIO in its own network namespace): %s; measured at the start: "+
			"requests on an open connection %.2f ms (median of 20), %.2f ms more than past the link, GET %.0f Mbit/s, PUT %.0f Mbit/s.\n\n",
			link.Link, link.RTT, link.Added, link.Get, link.Put)
	}
	fmt.Fprintf(&b, "%d repetitions. **local**: a cold vanilla restore on the node that prepared the function, from its disk, page cache evicted. "+
		"**lazy**: the first invocation on a node restarted with an empty data directory (no function, snapshot or chunk): it imports the function "+
		"and the snapshot without its memory from the registry, then restores with the strategy, memory pages fetched on demand "+
		"(cached, premap and snapbpf pull the memory first). **pull**: a fresh node pulls the snapshot in full, then restores it cold with vanilla. "+
		"First answer: what the client waited, request (the pull's, for pull) to answer. Import: `timing.import_ms`; restore: the invocation's "+
		"`timing.total_ms` less its `import_ms` (set-up, resume, invoke); cold: import + restore. "+
		"Fetched: compressed bytes the node's chunk cache fetched from the store for it, all told (the import: the function, the manifest, "+
		"the device state and the strategies' small files; the restore: memory pages, and FaaSnap's loading set, which faasnap streams); "+
		"on demand: the part fetched for page faults (`strategy_stats.source_fetched_bytes`). "+
		"Chunks: how many chunks it fetched; times the chunk size, the uncompressed bytes they hold at most (FaaSnap's loading set is "+
		"uncompressed). Cells: median (p10–p90).\n\n", r.Config.Reps)
	b.WriteString("| function | snapshot | prepare | loading set | working set | push | chunks (uploaded) | stored | data |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Prepared {
		if p.Push == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %s | %d pages | %.0f ms | %d (%d) | %s | %s |\n", p.Function, p.Snapshot, p.PrepareMS/1000,
			fmtMiB(float64(p.LoadingSetBytes)), p.WorkingSetPages, p.Push.PushMS, p.Push.Chunks, p.Push.Uploaded, fmtMiB(float64(p.Push.StoredBytes)), fmtMiB(float64(p.Push.DataBytes)))
	}
	b.WriteString("\n| function | kind | strategy | ok/n | first answer, ms | import, ms | restore, ms | cold, ms | fetched | on demand | fetched / loading set | chunks | chunks x size / loading set |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range r.groups() {
		ratio, nchunks, chunkRatio := "–", "–", "–"
		if ls := r.loadingSet(g.function); ls > 0 && g.kind != RemoteLocal && g.fetched.N > 0 {
			ratio = fmt.Sprintf("%.2fx", g.fetched.Median/float64(ls))
			nchunks = fmt.Sprintf("%.0f", g.chunks.Median)
			if cs := r.chunkSize(g.function); cs > 0 {
				chunkRatio = fmt.Sprintf("%.2fx", g.chunks.Median*float64(cs)/float64(ls))
			}
		}
		fetched, onDemand := "–", "–"
		if g.kind != RemoteLocal && g.fetched.N > 0 {
			fetched = fmtMiB(g.fetched.Median)
		}
		if g.kind == RemoteLazy && g.onDemand.N > 0 {
			onDemand = fmtMiB(g.onDemand.Median)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.function, g.kind, g.strategy, g.ok, g.n,
			sumCell(g.first), sumCell(g.imp), sumCell(g.total), sumCell(g.cold), fetched, onDemand, ratio, nchunks, chunkRatio)
	}
	b.WriteString("\n" + r.timeTable())
	b.WriteString("\n" + r.targets())
	return b.String()
}

// timeTable is where the restore's time went, per function, kind and
// strategy (medians of the samples that carry the invocation's details).
func (r *RemoteResult) timeTable() string {
	type cols struct{ vmm, load, setup, resume, chunks, fetchMS, parked, parkedMS []float64 }
	var keys []string
	rows := map[string]*cols{}
	for _, s := range r.Samples {
		if !s.OK || s.Restore == nil || s.Kind == RemotePull {
			continue
		}
		k := s.Function + " | " + s.Kind + " | " + s.Strategy
		c := rows[k]
		if c == nil {
			c = &cols{}
			rows[k] = c
			keys = append(keys, k)
		}
		c.vmm, c.load = append(c.vmm, s.Restore.VMMStartMS), append(c.load, s.Restore.LoadStateMS)
		c.setup, c.resume = append(c.setup, s.Restore.SetupMS), append(c.resume, s.Restore.ResumeMS)
		if st := s.Stats; st != nil {
			c.chunks = append(c.chunks, float64(st.SourceFetchedChunks+st.LoadingSetFetchedChunks))
			c.fetchMS, c.parked, c.parkedMS = append(c.fetchMS, st.SourceFetchMS), append(c.parked, float64(st.ParkedFaults)), append(c.parkedMS, st.ParkedMS)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Where the restore's time went (medians): set-up is VMM start (QEMU to QMP ready, REAP's working set installed) and device state; " +
		"chunks: fetched during the restore (memory on demand and FaaSnap's loading set); fetch: the time the memory's on-demand fetches took, summed; " +
		"parked: faults that waited for a fetch off the fault loop, and their waits summed.\n\n" +
		"| function | kind | strategy | set-up, ms | VMM start | device state | resume, ms | chunks | fetch, ms | parked faults | parked, ms |\n" +
		"|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	med := func(v []float64) string {
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", Summarize(v).Median)
	}
	for _, k := range keys {
		c := rows[k]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k, med(c.setup), med(c.vmm), med(c.load), med(c.resume),
			med(c.chunks), med(c.fetchMS), med(c.parked), med(c.parkedMS))
	}
	return b.String()
}

func (r *RemoteResult) loadingSet(fn string) int64 {
	for _, p := range r.Prepared {
		if p.Function == fn {
			return p.LoadingSetBytes
		}
	}
	return 0
}

func (r *RemoteResult) chunkSize(fn string) int64 {
	for _, p := range r.Prepared {
		if p.Function == fn && p.Push != nil {
			return p.Push.ChunkSize
		}
	}
	return 0
}

// targets says, per function, whether each target was met.
func (r *RemoteResult) targets() string {
	var b strings.Builder
	b.WriteString("Targets (medians):\n\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	for _, p := range r.Prepared {
		for _, st := range r.Config.Lazy {
			if g, ok := r.group(p.Function, RemoteLazy, st); ok && g.fetched.N > 0 && p.LoadingSetBytes > 0 {
				x := g.fetched.Median / float64(p.LoadingSetBytes)
				fmt.Fprintf(&b, "- %s, lazy %s: fetched %s = %.2fx the loading set (target at most %.1fx): %s",
					p.Function, st, fmtMiB(g.fetched.Median), x, TargetFetchedOverLoadingSet, verdict(x <= TargetFetchedOverLoadingSet))
				if cs := r.chunkSize(p.Function); cs > 0 {
					u := g.chunks.Median * float64(cs) / float64(p.LoadingSetBytes)
					fmt.Fprintf(&b, "; uncompressed, %.0f chunks hold at most %.2fx: %s", g.chunks.Median, u, verdict(u <= TargetFetchedOverLoadingSet))
				}
				b.WriteString("\n")
			}
		}
		local, lok := r.group(p.Function, RemoteLocal, "vanilla")
		for _, st := range r.Config.Lazy {
			lazy, zok := r.group(p.Function, RemoteLazy, st)
			if !lok || !zok || local.total.N == 0 || lazy.cold.N == 0 {
				continue
			}
			x := lazy.cold.Median / local.total.Median
			line := fmt.Sprintf("- %s, lazy %s: cold %.0f ms (import %.0f + restore %.0f) = %.2fx local vanilla %.0f ms (restore alone %.2fx)",
				p.Function, st, lazy.cold.Median, lazy.imp.Median, lazy.total.Median, x, local.total.Median, lazy.total.Median/local.total.Median)
			if p.Function == "hello" {
				line += fmt.Sprintf("; target at most %.0fx: %s", TargetLazyOverLocal, verdict(x <= TargetLazyOverLocal))
			}
			b.WriteString(line + "\n")
		}
		lazy, zok := r.group(p.Function, RemoteLazy, "vanilla")
		pull, pok := r.group(p.Function, RemotePull, "vanilla")
		if zok && pok && lazy.first.N > 0 && pull.first.N > 0 {
			fmt.Fprintf(&b, "- %s: first answer lazy vanilla %.0f ms vs full pull then restore %.0f ms (%.2fx)\n",
				p.Function, lazy.first.Median, pull.first.Median, lazy.first.Median/pull.first.Median)
		}
	}
	return b.String()
}

func sumCell(s Summary) string {
	if s.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", s.Median, s.P10, s.P90)
}

func fmtMiB(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
