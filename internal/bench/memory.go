package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// DefaultClones are the numbers of VMs restored from one snapshot and kept
// alive in the memory-per-clone experiment.
var DefaultClones = []int{1, 4, 8, 16}

// MemorySample is the host memory N clones of one snapshot use under one
// strategy, measured after every clone answered one invocation and while
// all of them are alive.
type MemorySample struct {
	Function string `json:"function"`
	Strategy string `json:"strategy"`
	Clones   int    `json:"clones"`
	// Per VM (QEMU process), summed over the clones: private anonymous
	// memory (guest pages written or copied in, QEMU's own heap and TCG
	// translation cache), and RSS and PSS for reference.
	AnonBytes uint64 `json:"anon_bytes"`
	// HugetlbAnonBytes are huge pages copied on write (premap from a
	// hugetlbfs store), private like AnonBytes but not part of it.
	HugetlbAnonBytes uint64 `json:"hugetlb_anon_bytes,omitempty"`
	// HugetlbReservedBytes are huge pages the clones' private mappings
	// have reserved and not (yet) used for copy-on-write: not in use, but
	// unavailable to anything else while the clones live. Not in the total.
	HugetlbReservedBytes int64 `json:"hugetlb_reserved_bytes,omitempty"`
	// DeviceBytes are the clones' own ranges of a device-DAX store
	// (premap on devdax): persistent memory, private to each clone, in
	// the total.
	DeviceBytes int64  `json:"device_bytes,omitempty"`
	RSSBytes    uint64 `json:"rss_bytes"`
	PSSBytes    uint64 `json:"pss_bytes"`
	// Shared, counted once: page-cache pages of the snapshot's files
	// (memory file, strategy artifacts) and its memory-store copy.
	PageCacheBytes int64 `json:"page_cache_bytes"`
	StoreBytes     int64 `json:"store_bytes"`
	// TotalBytes = AnonBytes + HugetlbAnonBytes + DeviceBytes +
	// PageCacheBytes + StoreBytes: what the host
	// spends on the clones' guest memory and VMMs.
	TotalBytes uint64 `json:"total_bytes"`
	// PerCloneBytes = TotalBytes / Clones.
	PerCloneBytes uint64 `json:"per_clone_bytes"`
	// AnonPerVM are each clone's private bytes (anonymous, huge pages
	// and device ranges included).
	AnonPerVM []uint64 `json:"anon_per_vm"`
	RestoreMS float64  `json:"restore_ms"` // restoring and invoking all clones (sequentially)
}

// MemoryResult is a memory-per-clone run.
type MemoryResult struct {
	Machine    Machine           `json:"machine"`
	When       time.Time         `json:"when"`
	Strategies []string          `json:"strategies"`
	Clones     []int             `json:"clones"`
	Cases      []FunctionCase    `json:"cases"`
	Samples    []MemorySample    `json:"samples"`
	Snapshots  map[string]string `json:"snapshots"` // function -> warm snapshot measured
}

// RunMemory prepares each case (or reuses prepared, the map from function
// to its warm snapshot id), and for every strategy and clone count N
// evicts the snapshot's files from the page cache, restores N VMs from it,
// invokes each once with the test input, measures every VM's process memory
// and the snapshot's shared memory, and deletes the VMs. premap's snapshot
// is placed in the memory store first (and its copy counted once).
func RunMemory(ctx context.Context, c *client.Client, cases []FunctionCase, prepared map[string]string,
	strategies []string, clones []int, progress io.Writer) (*MemoryResult, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	say := func(f string, a ...any) { fmt.Fprintf(progress, "[bench memory] "+f+"\n", a...) }
	res := &MemoryResult{Machine: DescribeMachine(info), When: time.Now().UTC(), Strategies: strategies,
		Clones: clones, Cases: cases, Snapshots: map[string]string{}}
	for _, fc := range cases {
		snapID := prepared[fc.Name]
		if snapID == "" {
			pr, err := prepareCase(ctx, c, fc, say, "prepare")
			if err != nil {
				return nil, err
			}
			snapID = pr.Warm.ID
		}
		res.Snapshots[fc.Name] = snapID
		snap, err := c.GetSnapshot(ctx, snapID)
		if err != nil {
			return nil, err
		}
		for _, s := range strategies {
			if usesStore(info, s) {
				if _, err := c.StoreSnapshot(ctx, snapID); err != nil {
					return nil, fmt.Errorf("store %s for %s: %w", snapID, s, err)
				}
			}
			for _, n := range clones {
				smp, err := measureClones(ctx, c, fc, snap, s, usesStore(info, s), n)
				if err != nil {
					return nil, fmt.Errorf("%s/%s/%d clones: %w", fc.Name, s, n, err)
				}
				res.Samples = append(res.Samples, *smp)
				say("%-8s %-8s %2d clones: total %7.1f MiB (%6.1f MiB per clone): anon %7.1f, page cache %6.1f, store %6.1f",
					fc.Name, s, n, mib(smp.TotalBytes), mib(smp.PerCloneBytes), mib(smp.AnonBytes),
					float64(smp.PageCacheBytes)/(1<<20), float64(smp.StoreBytes)/(1<<20))
			}
			if usesStore(info, s) {
				if err := c.UnstoreSnapshot(ctx, snapID); err != nil {
					return nil, err
				}
			}
		}
	}
	return res, nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// measureClones restores n clones, invokes each, measures, and deletes them
// (also on failure).
func measureClones(ctx context.Context, c *client.Client, fc FunctionCase, snap *client.Snapshot, strategy string, stored bool, n int) (*MemorySample, error) {
	if _, err := c.EvictSnapshot(ctx, snap.ID); err != nil {
		return nil, fmt.Errorf("evict: %w", err)
	}
	var vms []string
	defer func() {
		for _, id := range vms {
			_ = c.DeleteVM(context.WithoutCancel(ctx), id)
		}
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		vm, err := c.RestoreVM(ctx, snap.ID, strategy)
		if err != nil {
			return nil, fmt.Errorf("restore clone %d: %w", i, err)
		}
		vms = append(vms, vm.ID)
		if vm.Strategy != strategy {
			return nil, fmt.Errorf("clone %d ran as %s", i, vm.Strategy)
		}
		inv, err := c.InvokeVM(ctx, vm.ID, fc.TestEvent, client.InvokeOptions{})
		if err != nil {
			return nil, fmt.Errorf("invoke clone %d: %w", i, err)
		}
		if !inv.OK {
			return nil, fmt.Errorf("clone %d: function raised %s: %s", i, inv.Error.Type, inv.Error.Message)
		}
	}
	smp := &MemorySample{Function: fc.Name, Strategy: strategy, Clones: n,
		RestoreMS: float64(time.Since(start).Microseconds()) / 1000}
	for _, id := range vms {
		m, err := c.VMMemory(ctx, id)
		if err != nil {
			return nil, err
		}
		smp.AnonBytes += m.AnonBytes
		smp.HugetlbAnonBytes += m.HugetlbAnonBytes
		smp.RSSBytes += m.RSSBytes
		smp.PSSBytes += m.PSSBytes
		smp.AnonPerVM = append(smp.AnonPerVM, m.AnonBytes+m.HugetlbAnonBytes)
	}
	sm, err := c.SnapshotMemory(ctx, snap.ID)
	if err != nil {
		return nil, err
	}
	smp.PageCacheBytes, smp.StoreBytes = sm.PageCacheBytes, sm.StoreBytes
	if st, err := c.Store(ctx); err == nil && st.Kind == "hugetlbfs" {
		smp.HugetlbReservedBytes = st.ReservedBytes
	} else if err == nil && st.Kind == "devdax" && stored {
		if st.Clones != n {
			return nil, fmt.Errorf("%d clones alive but the device store has %d clone ranges", n, st.Clones)
		}
		smp.DeviceBytes = st.ReservedBytes
		for i := range smp.AnonPerVM {
			smp.AnonPerVM[i] += uint64(st.ReservedBytes / int64(n))
		}
	}
	smp.TotalBytes = smp.AnonBytes + smp.HugetlbAnonBytes + uint64(smp.DeviceBytes) + uint64(sm.PageCacheBytes) + uint64(sm.StoreBytes)
	smp.PerCloneBytes = smp.TotalBytes / uint64(n)
	return smp, nil
}

// Markdown renders the run as a table per function: total and per-clone
// host memory by strategy and clone count, and the split into private and
// shared memory.
func (r *MemoryResult) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores, %d GiB, %s, kernel %s, disk %s; QEMU %s, accelerator **%s**, %s. %s.\n\n",
		m.Cores, m.MemoryGiB, m.CPU, m.Kernel, m.Disk, m.QEMU, m.Accel, m.HintText(), r.When.Format("2006-01-02 15:04 UTC"))
	b.WriteString("N clones restored from one snapshot (page cache evicted first), each invoked once with the test input, all alive when measured. " +
		"Total = Σ private memory of the N QEMU processes (anonymous pages, huge pages copied on write from a hugetlbfs store, and each clone's own range of a device-DAX store) + page-cache pages of the snapshot's files + its memory-store copy, the shared parts counted once. MiB.\n\n")
	fns := map[string]bool{}
	for _, s := range r.Samples {
		fns[s.Function] = true
	}
	names := make([]string, 0, len(fns))
	for f := range fns {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, fn := range names {
		fmt.Fprintf(&b, "**%s** — per clone (total):\n\n| strategy |", fn)
		for _, n := range r.Clones {
			fmt.Fprintf(&b, " N=%d |", n)
		}
		b.WriteString(" private per VM (N=max) | shared (N=max) |\n|---|")
		for range r.Clones {
			b.WriteString("---:|")
		}
		b.WriteString("---:|---:|\n")
		for _, s := range r.Strategies {
			fmt.Fprintf(&b, "| %s |", s)
			var last *MemorySample
			for _, n := range r.Clones {
				i := slices.IndexFunc(r.Samples, func(x MemorySample) bool {
					return x.Function == fn && x.Strategy == s && x.Clones == n
				})
				if i < 0 {
					b.WriteString(" – |")
					continue
				}
				x := r.Samples[i]
				last = &r.Samples[i]
				fmt.Fprintf(&b, " %.1f (%.0f) |", mib(x.PerCloneBytes), mib(x.TotalBytes))
			}
			if last != nil {
				fmt.Fprintf(&b, " %.1f | %.1f |\n", (mib(last.AnonBytes+last.HugetlbAnonBytes)+float64(last.DeviceBytes)/(1<<20))/float64(last.Clones),
					float64(last.PageCacheBytes+last.StoreBytes)/(1<<20))
			} else {
				b.WriteString(" – | – |\n")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Figures are line charts per function: host memory per clone against the
// number of clones, one line per strategy.
func (r *MemoryResult) Figures() map[string]string {
	out := map[string]string{}
	fns := map[string]bool{}
	for _, s := range r.Samples {
		fns[s.Function] = true
	}
	for fn := range fns {
		var lines []Line
		for _, s := range r.Strategies {
			l := Line{Name: s}
			for _, n := range r.Clones {
				i := slices.IndexFunc(r.Samples, func(x MemorySample) bool {
					return x.Function == fn && x.Strategy == s && x.Clones == n
				})
				if i >= 0 {
					l.X = append(l.X, float64(n))
					l.Y = append(l.Y, mib(r.Samples[i].PerCloneBytes))
				}
			}
			if len(l.X) > 0 {
				lines = append(lines, l)
			}
		}
		c := LineChart{Title: "Host memory per clone: " + fn + " (N clones of one snapshot alive)",
			XLabel: "clones (N)", YLabel: "MiB per clone", Series: lines, LogX: true}
		out["memory-"+fn+".svg"] = c.SVG()
	}
	return out
}
