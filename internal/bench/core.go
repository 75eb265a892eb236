package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/client"
)

// Machine describes where a result was measured.
type Machine struct {
	Cores     int    `json:"cores"`
	MemoryGiB int    `json:"memory_gib"`
	CPU       string `json:"cpu"`
	Kernel    string `json:"kernel"`
	Accel     string `json:"accel"`
	AccelWhy  string `json:"accel_detail"`
	QEMU      string `json:"qemu"`
	Disk      string `json:"disk"`
	// HugePageHint says whether restores kept QEMU's MADV_HUGEPAGE on
	// guest RAM; nil in runs from before thaw could drop it (they kept it).
	HugePageHint *bool `json:"hugepage_hint,omitempty"`
}

// HintText says what the run did with QEMU's huge-page hint.
func (m Machine) HintText() string {
	switch {
	case m.HugePageHint == nil:
		return "QEMU's huge-page hint on guest RAM kept (runs before it could be dropped)"
	case *m.HugePageHint:
		return "QEMU's huge-page hint on guest RAM kept (--hugepage-hint)"
	}
	return "QEMU's huge-page hint on guest RAM dropped (the default)"
}

// DescribeMachine reads /proc for the host and the daemon for the rest.
func DescribeMachine(info *client.Info) Machine {
	hint := info.HugePageHint
	m := Machine{Cores: runtime.NumCPU(), Accel: info.Accel.Accel, AccelWhy: info.Accel.Detail, QEMU: info.VMM.Version,
		HugePageHint: &hint}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		fmt.Sscanf(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"), "%d", &kb)
		m.MemoryGiB = (kb + (1 << 19)) >> 20
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Disk = diskModel(info.DataDir)
	return m
}

func diskModel(dir string) string {
	// A data directory on a loop device (emulated remote storage) is
	// named by its backing file: the host's disk is not what it reads.
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil {
		sys := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
		if real, err := filepath.EvalSymlinks(sys); err == nil && strings.HasPrefix(filepath.Base(real), "loop") {
			back, _ := os.ReadFile(filepath.Join(real, "loop", "backing_file"))
			return filepath.Base(real) + " (loop device over " + strings.TrimSpace(string(back)) + ")"
		}
	}
	// The block device's rotational flag is what matters for page-in cost.
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "loop") || strings.HasPrefix(e.Name(), "ram") {
			continue
		}
		rot, err := os.ReadFile("/sys/block/" + e.Name() + "/queue/rotational")
		if err == nil {
			kind := "ssd/nvme"
			if strings.TrimSpace(string(rot)) == "1" {
				kind = "rotational"
			}
			return e.Name() + " (" + kind + ")"
		}
	}
	return "unknown"
}

// CoreConfig configures the core benchmark.
type CoreConfig struct {
	Function  string // bundled function to use
	Dir       string // its directory
	MemoryMiB int
	Boots     int // VMs booted (boot and snapshot samples)
	Restores  int // cold invocations from one snapshot
	Event     json.RawMessage
}

// CoreSample is one measured operation (one JSON line).
type CoreSample struct {
	Op        string  `json:"op"` // boot, snapshot, cold
	MemoryMiB int     `json:"memory_mib"`
	MS        float64 `json:"ms"`
	SetupMS   float64 `json:"setup_ms,omitempty"`
	ResumeMS  float64 `json:"resume_ms,omitempty"`
	InvokeMS  float64 `json:"invoke_ms,omitempty"`
	VMMStart  float64 `json:"vmm_start_ms,omitempty"`
	LoadState float64 `json:"load_state_ms,omitempty"`
	PauseMS   float64 `json:"pause_ms,omitempty"`
}

// CoreResult is the core benchmark's outcome.
type CoreResult struct {
	Machine   Machine              `json:"machine"`
	MemoryMiB int                  `json:"memory_mib"`
	Function  string               `json:"function"`
	Strategy  string               `json:"strategy"`
	Summaries map[string]Summary   `json:"summaries"`
	Samples   []CoreSample         `json:"samples"`
	When      time.Time            `json:"when"`
	Extra     map[string]any       `json:"extra,omitempty"`
	progress  func(string, ...any) `json:"-"`
}

// RunCore measures boot-to-ready, snapshot creation, and the cold-start
// path (restore set-up and resume) of one function with vanilla restores.
func RunCore(ctx context.Context, c *client.Client, cfg CoreConfig, progress io.Writer) (*CoreResult, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	say := func(f string, a ...any) { fmt.Fprintf(progress, "[bench core] "+f+"\n", a...) }
	name := fmt.Sprintf("bench-%s-%d", cfg.Function, cfg.MemoryMiB)
	if _, err := c.GetFunction(ctx, name); err != nil {
		if _, err := c.CreateFunctionFromDir(ctx, name, cfg.Dir, cfg.MemoryMiB, 1); err != nil {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
	}
	res := &CoreResult{Machine: DescribeMachine(info), MemoryMiB: cfg.MemoryMiB, Function: cfg.Function,
		Strategy: "vanilla", When: time.Now().UTC()}
	var snapID string
	for i := 0; i < cfg.Boots; i++ {
		say("boot %d/%d (%d MiB)", i+1, cfg.Boots, cfg.MemoryMiB)
		vm, err := c.BootVM(ctx, name)
		if err != nil {
			return nil, err
		}
		res.Samples = append(res.Samples, CoreSample{Op: "boot", MemoryMiB: cfg.MemoryMiB, MS: vm.BootMS})
		snap, err := c.CreateSnapshot(ctx, vm.ID)
		if err != nil {
			return nil, err
		}
		res.Samples = append(res.Samples, CoreSample{Op: "snapshot", MemoryMiB: cfg.MemoryMiB, MS: snap.CreateMS, PauseMS: snap.PauseMS})
		if err := c.DeleteVM(ctx, vm.ID); err != nil {
			return nil, err
		}
		if snapID != "" {
			if err := c.DeleteSnapshot(ctx, snapID); err != nil {
				return nil, err
			}
		}
		snapID = snap.ID
	}
	for i := 0; i < cfg.Restores; i++ {
		inv, err := c.InvokeSnapshot(ctx, snapID, cfg.Event, client.InvokeOptions{Strategy: "vanilla"})
		if err != nil {
			return nil, err
		}
		if !inv.OK {
			return nil, fmt.Errorf("cold invocation failed: %s: %s", inv.Error.Type, inv.Error.Message)
		}
		r := inv.Timing.Restore
		say("cold %d/%d: setup %.1f ms, resume %.1f ms, total %.1f ms", i+1, cfg.Restores, r.SetupMS, r.ResumeMS, inv.Timing.TotalMS)
		res.Samples = append(res.Samples, CoreSample{Op: "cold", MemoryMiB: cfg.MemoryMiB, MS: inv.Timing.TotalMS,
			SetupMS: r.SetupMS, ResumeMS: r.ResumeMS, InvokeMS: inv.Timing.InvokeMS, VMMStart: r.VMMStartMS, LoadState: r.LoadStateMS})
	}
	if err := c.DeleteSnapshot(ctx, snapID); err != nil {
		return nil, err
	}
	res.Summaries = summarizeCore(res.Samples)
	return res, nil
}

func summarizeCore(samples []CoreSample) map[string]Summary {
	cols := map[string][]float64{}
	for _, s := range samples {
		switch s.Op {
		case "boot":
			cols["boot_to_ready_ms"] = append(cols["boot_to_ready_ms"], s.MS)
		case "snapshot":
			cols["snapshot_ms"] = append(cols["snapshot_ms"], s.MS)
			cols["snapshot_pause_ms"] = append(cols["snapshot_pause_ms"], s.PauseMS)
		case "cold":
			cols["restore_setup_ms"] = append(cols["restore_setup_ms"], s.SetupMS)
			cols["restore_vmm_start_ms"] = append(cols["restore_vmm_start_ms"], s.VMMStart)
			cols["restore_load_state_ms"] = append(cols["restore_load_state_ms"], s.LoadState)
			cols["resume_ms"] = append(cols["resume_ms"], s.ResumeMS)
			cols["invoke_ms"] = append(cols["invoke_ms"], s.InvokeMS)
			cols["cold_total_ms"] = append(cols["cold_total_ms"], s.MS)
		}
	}
	out := map[string]Summary{}
	for k, v := range cols {
		out[k] = Summarize(v)
	}
	return out
}

// CoreRows is the order rows appear in the Markdown table.
var CoreRows = []string{"boot_to_ready_ms", "snapshot_ms", "snapshot_pause_ms", "restore_setup_ms",
	"restore_vmm_start_ms", "restore_load_state_ms", "resume_ms", "invoke_ms", "cold_total_ms"}

// Markdown renders results (one per memory size) as a table.
func CoreMarkdown(results []*CoreResult) string {
	var b strings.Builder
	if len(results) == 0 {
		return ""
	}
	m := results[0].Machine
	fmt.Fprintf(&b, "Machine: %d cores, %d GiB, %s, kernel %s, disk %s; QEMU %s, accelerator **%s**, %s (%s). Function `%s`, strategy `vanilla`, %s.\n\n",
		m.Cores, m.MemoryGiB, m.CPU, m.Kernel, m.Disk, m.QEMU, m.Accel, m.HintText(), m.AccelWhy, results[0].Function, results[0].When.Format("2006-01-02"))
	b.WriteString("| metric (ms) |")
	for _, r := range results {
		fmt.Fprintf(&b, " %d MiB: median | p10–p90 | n |", r.MemoryMiB)
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---|---|---|")
	}
	b.WriteString("\n")
	for _, row := range CoreRows {
		fmt.Fprintf(&b, "| %s |", row)
		for _, r := range results {
			s := r.Summaries[row]
			fmt.Fprintf(&b, " %.1f | %.1f–%.1f | %d |", s.Median, s.P10, s.P90, s.N)
		}
		b.WriteString("\n")
	}
	return b.String()
}
