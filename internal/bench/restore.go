package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// The restore experiment: N concurrent cold starts of one function per
// strategy, with the VMM pool missing (every restore starts its VMM) and
// hitting (every restore takes a VMM the pool started ahead of it), with
// set-up, resume and the host CPU each cold start cost.
const (
	PoolMiss = "miss"
	PoolHit  = "hit"
)

// RestoreConfig configures a restore run.
type RestoreConfig struct {
	Root        string          `json:"-"` // repository root (functions/)
	Function    string          `json:"function"`
	MemoryMiB   int             `json:"memory_mib"`
	Strategies  []string        `json:"strategies"`
	Concurrency []int           `json:"concurrency"`
	Reps        int             `json:"reps"`
	Event       json.RawMessage `json:"event"`
	// DaemonPID is thawd's process, whose CPU time is read around every
	// burst; 0: unknown, the daemon's CPU is reported unmeasured.
	DaemonPID int `json:"daemon_pid,omitempty"`
	// PoolWait bounds the wait for the pool to hold N standby VMs.
	PoolWait time.Duration `json:"-"`
	Timeout  time.Duration `json:"-"` // one invocation
	Sink     io.Writer     `json:"-"` // every sample as a JSON line, as measured
}

// DefaultRestoreConfig is hello at 512 MiB, vanilla and faasnap, 1, 4 and
// 16 concurrent cold starts, 5 repetitions.
func DefaultRestoreConfig(root string) RestoreConfig {
	return RestoreConfig{Root: root, Function: "hello", MemoryMiB: 512, Strategies: []string{"vanilla", "faasnap"},
		Concurrency: []int{1, 4, 16}, Reps: 5, Event: json.RawMessage(`{"name":"test"}`),
		PoolWait: 10 * time.Minute, Timeout: 10 * time.Minute}
}

// MaxPool is the largest VMM pool a function may have (vmm_pool).
const MaxPool = 16

// Check validates the configuration against the daemon's strategies.
func (c *RestoreConfig) Check(daemonStrategies []string) error {
	var errs []error
	if c.Reps < 1 {
		errs = append(errs, fmt.Errorf("reps must be at least 1, got %d", c.Reps))
	}
	if len(c.Concurrency) == 0 {
		errs = append(errs, errors.New("no concurrency level"))
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > MaxPool {
			errs = append(errs, fmt.Errorf("concurrency %d outside 1..%d (a function's VMM pool holds at most %d)", n, MaxPool, MaxPool))
		}
	}
	if len(c.Strategies) == 0 {
		errs = append(errs, errors.New("no strategy"))
	}
	for _, s := range c.Strategies {
		if !slices.Contains(daemonStrategies, s) {
			errs = append(errs, fmt.Errorf("strategy %q is not one of the daemon's (%s)", s, strings.Join(daemonStrategies, ", ")))
		}
	}
	if c.MemoryMiB < 1 {
		errs = append(errs, fmt.Errorf("memory must be positive, got %d MiB", c.MemoryMiB))
	}
	return errors.Join(errs...)
}

// RestoreSample is one cold start (one JSON line). CPU times are
// milliseconds of user plus system time; null when not measured.
type RestoreSample struct {
	Function    string `json:"function"` // the bench's copy of the function (its VMM pool)
	Strategy    string `json:"strategy"`
	Pool        string `json:"pool"` // what was arranged: miss or hit
	Concurrency int    `json:"concurrency"`
	Rep         int    `json:"rep"`
	Slot        int    `json:"slot"`
	Snapshot    string `json:"snapshot"`
	// VMM is what the answer said: pooled or started. A hit asked for
	// whose answer says started is a miss and counted so.
	VMM string `json:"vmm,omitempty"`
	// Error is a failed cold start; TooMany, that it was refused by
	// admission (429).
	Error           string  `json:"error,omitempty"`
	TooMany         bool    `json:"too_many,omitempty"`
	WallMS          float64 `json:"wall_ms"` // client: burst start to this answer
	TotalMS         float64 `json:"total_ms"`
	SetupMS         float64 `json:"setup_ms"`
	ResumeMS        float64 `json:"resume_ms"`
	InvokeMS        float64 `json:"invoke_ms"`
	VMMStartMS      float64 `json:"vmm_start_ms"`
	LoadStateMS     float64 `json:"load_state_ms"`
	AdmissionWaitMS float64 `json:"admission_wait_ms,omitempty"`
	// QEMUCPUMS is the VMM process's CPU from the request to the answer:
	// all of its life for a started VMM; for a pooled one, its CPU at
	// the answer less StandbyCPUMS, what it used before the request.
	QEMUCPUMS    *float64 `json:"qemu_cpu_ms"`
	StandbyCPUMS *float64 `json:"standby_cpu_ms,omitempty"`
	// DaemonCPUMS is thawd's CPU over the burst divided by the burst's
	// successful cold starts.
	DaemonCPUMS *float64 `json:"daemon_cpu_ms"`
}

// Hit says the cold start was served by a pooled VMM.
func (s RestoreSample) Hit() bool { return s.Error == "" && s.VMM == "pooled" }

// RestoreResult is a restore run.
type RestoreResult struct {
	Machine   Machine           `json:"machine"`
	When      time.Time         `json:"when"`
	DurationS float64           `json:"duration_s"`
	Config    RestoreConfig     `json:"config"`
	Snapshots map[string]string `json:"snapshots"` // bench function -> warm snapshot
	Notes     []string          `json:"notes,omitempty"`
	Groups    []RestoreGroup    `json:"groups"`
	Samples   []RestoreSample   `json:"-"` // in restore.jsonl
}

// restoreRun is a restore run in progress.
type restoreRun struct {
	info *client.Info // the daemon, its strategies described
	c    *client.Client
	cfg  RestoreConfig
	res  *RestoreResult
	say  func(string, ...any)
}

// RunRestore measures pool misses, then pool hits, for every strategy and
// concurrency level. Misses use a copy of the function with no VMM pool;
// hits, for N concurrent cold starts, a copy whose pool holds N. Each copy
// is prepared once (faasnap needs its artifacts) and keeps no VM alive
// after a cold invocation (keep_alive_s -1), so every burst starts from
// the same state: no VM of the function but the pool's.
func RunRestore(ctx context.Context, c *client.Client, cfg RestoreConfig, progress io.Writer) (*RestoreResult, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	if err := cfg.Check(info.Strategies); err != nil {
		return nil, err
	}
	if cfg.DaemonPID > 0 {
		if err := checkDaemonPID(cfg.DaemonPID); err != nil {
			return nil, err
		}
	}
	r := &restoreRun{c: c, info: info, cfg: cfg, say: func(f string, a ...any) { fmt.Fprintf(progress, "[bench restore] "+f+"\n", a...) },
		res: &RestoreResult{Machine: DescribeMachine(info), When: time.Now().UTC(), Config: cfg, Snapshots: map[string]string{}}}
	if cfg.DaemonPID <= 0 {
		r.res.Notes = append(r.res.Notes, "thawd's pid was not given (--daemon-pid or THAWD_PID): the daemon's CPU is unmeasured")
	}
	start := time.Now()
	err = r.run(ctx)
	r.res.DurationS = time.Since(start).Seconds()
	r.res.Summarize()
	return r.res, err
}

func (r *restoreRun) run(ctx context.Context) error {
	snap, err := r.prepare(ctx, r.fnName(PoolMiss, 0), -1)
	if err != nil {
		return err
	}
	for rep := 0; rep < r.cfg.Reps; rep++ {
		for _, n := range r.cfg.Concurrency {
			for i := range r.cfg.Strategies {
				s := r.cfg.Strategies[(i+rep)%len(r.cfg.Strategies)]
				if err := r.idle(ctx, r.fnName(PoolMiss, 0), snap, s, 0); err != nil {
					return err
				}
				r.burst(ctx, PoolMiss, r.fnName(PoolMiss, 0), snap, s, n, rep)
			}
		}
	}
	for _, n := range r.cfg.Concurrency {
		if err := r.hits(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// hits runs every strategy's hit bursts of n with a copy of the function
// whose pool holds n; a strategy's standby VMs go before the next one's
// (the pool's memory budget need fit only one set).
func (r *restoreRun) hits(ctx context.Context, n int) error {
	fn := r.fnName(PoolHit, n)
	snap, err := r.prepare(ctx, fn, n)
	if err != nil {
		return err
	}
	for _, s := range r.cfg.Strategies {
		// Standby VMs another strategy (or prepare's restores) left.
		if err := r.drain(ctx, fn, snap); err != nil {
			return err
		}
		for rep := 0; rep < r.cfg.Reps; rep++ {
			if err := r.idle(ctx, fn, snap, s, n); err != nil {
				return err
			}
			r.burst(ctx, PoolHit, fn, snap, s, n, rep)
		}
	}
	return r.drain(ctx, fn, snap)
}

// drain stops fn's standby VMs of snap once no start is under way (a
// refill still starting would come back after): evicting the snapshot
// stops them and gives their room in the pool's budget back.
func (r *restoreRun) drain(ctx context.Context, fn, snap string) error {
	deadline := time.Now().Add(r.cfg.PoolWait)
	for {
		vms, err := r.c.ListVMs(ctx)
		if err != nil {
			return err
		}
		_, starting, busy := countVMs(vms, fn, "", "")
		if starting == 0 {
			if busy == 0 {
				return nil
			}
			if _, err := r.c.EvictSnapshot(ctx, snap); err != nil {
				return fmt.Errorf("drop the standby VMs of %s: %w", snap, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: after %s, %d VMs still starting and %d alive", fn, r.cfg.PoolWait, starting, busy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// fnName is the bench's copy of the function for a pool mode.
func (r *restoreRun) fnName(pool string, n int) string {
	if pool == PoolMiss {
		return fmt.Sprintf("bench-restore-%s-nopool", r.cfg.Function)
	}
	return fmt.Sprintf("bench-restore-%s-pool%d", r.cfg.Function, n)
}

// prepare creates fn (VMM pool pool: -1 none) unless it exists with those
// settings, prepares it and returns its warm snapshot.
func (r *restoreRun) prepare(ctx context.Context, fn string, pool int) (string, error) {
	if f, err := r.c.GetFunction(ctx, fn); err == nil {
		if f.VMMPool != pool || f.KeepAliveS != -1 || f.MemoryMiB != r.cfg.MemoryMiB {
			return "", fmt.Errorf("function %s exists with vmm_pool %d, keep_alive_s %d, %d MiB (want %d, -1, %d MiB): delete it first",
				fn, f.VMMPool, f.KeepAliveS, f.MemoryMiB, pool, r.cfg.MemoryMiB)
		}
	} else if !errors.Is(err, client.ErrNotFound) {
		return "", err
	} else if _, err := r.c.CreateFunctionFromDir(ctx, fn, filepath.Join(r.cfg.Root, "functions", r.cfg.Function), r.cfg.MemoryMiB, 1,
		client.WithVMMPool(pool, int(r.cfg.PoolWait/time.Second)+600), client.WithKeepAlive(-1)); err != nil {
		return "", fmt.Errorf("create %s: %w", fn, err)
	}
	r.say("%s: prepare (boot, clean snapshot, record, warm snapshot, artifacts)", fn)
	t0 := time.Now()
	pr, err := r.c.Prepare(ctx, fn, r.cfg.Event, client.PrepareOptions{Timeout: r.cfg.Timeout})
	if err != nil {
		return "", fmt.Errorf("prepare %s: %w", fn, err)
	}
	r.say("%s: warm snapshot %s in %s", fn, pr.Warm.ID, time.Since(t0).Round(time.Second))
	if s := StoreUsers(r.info, r.cfg.Strategies); len(s) > 0 { // they map the snapshot from the memory store
		if _, err := r.c.StoreSnapshot(ctx, pr.Warm.ID); err != nil {
			return "", fmt.Errorf("store %s for %s: %w", pr.Warm.ID, strings.Join(s, ", "), err)
		}
	}
	r.res.Snapshots[fn] = pr.Warm.ID
	return pr.Warm.ID, nil
}

// checkDaemonPID refuses a pid that is not a thawd process.
func checkDaemonPID(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return fmt.Errorf("daemon pid %d: %w", pid, err)
	}
	if comm := strings.TrimSpace(string(b)); comm != "thawd" {
		return fmt.Errorf("daemon pid %d is %q, not thawd", pid, comm)
	}
	return nil
}

// daemonCPU is thawd's CPU time so far, or -1 when it is unknown.
func (r *restoreRun) daemonCPU() float64 {
	if r.cfg.DaemonPID <= 0 {
		return -1
	}
	ms, err := procstat.CPUTime(r.cfg.DaemonPID)
	if err != nil {
		return -1
	}
	return ms
}

// idle waits until fn has no VM but standby ones and, when want > 0, the
// pool holds want standby VMs of snap and strategy. A pool short of want
// with no start under way (a refill the budgets cut short) is filled by
// one restore, which takes a standby VM or starts one, and refills.
func (r *restoreRun) idle(ctx context.Context, fn, snap, strategy string, want int) error {
	deadline := time.Now().Add(r.cfg.PoolWait)
	var lastTrigger time.Time
	for {
		vms, err := r.c.ListVMs(ctx)
		if err != nil {
			return err
		}
		standby, starting, busy := countVMs(vms, fn, snap, strategy)
		if standby >= want && starting == 0 && busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s/%s: after %s the pool holds %d of %d standby VMs (%d starting, %d other VMs of %s alive)",
				snap, strategy, r.cfg.PoolWait, standby, want, starting, busy, fn)
		}
		if want > 0 && standby < want && starting == 0 && busy == 0 && time.Since(lastTrigger) > 5*time.Second {
			lastTrigger = time.Now()
			vm, err := r.c.RestoreVM(ctx, snap, strategy)
			if err != nil {
				return fmt.Errorf("restore %s/%s to fill the pool: %w", snap, strategy, err)
			}
			if err := r.c.DeleteVM(ctx, vm.ID); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// countVMs counts fn's live VMs: standby ones of snap and strategy, ones
// starting (booting) and the others (running, paused, other standby).
func countVMs(vms []client.VM, fn, snap, strategy string) (standby, starting, busy int) {
	for _, v := range vms {
		if v.Function != fn {
			continue
		}
		switch {
		case v.State == "standby" && v.Snapshot == snap && v.Strategy == strategy:
			standby++
		case v.State == "booting":
			starting++
		case v.State == "running" || v.State == "paused" || v.State == "standby":
			busy++
		}
	}
	return standby, starting, busy
}

// burst starts n cold invocations of snap under strategy at once, waits
// for all and records them; failures are samples too.
func (r *restoreRun) burst(ctx context.Context, pool, fn, snap, strategy string, n, rep int) {
	out := make([]RestoreSample, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	cpu0 := r.daemonCPU()
	t0 := time.Now()
	for k := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			inv, err := r.c.InvokeSnapshot(ctx, snap, r.cfg.Event, client.InvokeOptions{Strategy: strategy, Timeout: r.cfg.Timeout})
			out[k] = restoreSampleOf(inv, err, time.Since(t0))
		}()
	}
	close(start)
	wg.Wait()
	cpu1 := r.daemonCPU()
	ok := 0
	for _, s := range out {
		if s.Error == "" {
			ok++
		}
	}
	for k := range out {
		s := &out[k]
		s.Function, s.Strategy, s.Pool, s.Concurrency, s.Rep, s.Slot, s.Snapshot = fn, strategy, pool, n, rep, k, snap
		if cpu0 >= 0 && cpu1 >= 0 && ok > 0 {
			d := (cpu1 - cpu0) / float64(ok)
			s.DaemonCPUMS = &d
		}
		r.add(*s)
	}
}

// restoreSampleOf reads one answer (or its failure).
func restoreSampleOf(inv *client.Invocation, err error, wall time.Duration) RestoreSample {
	s := RestoreSample{WallMS: float64(wall.Microseconds()) / 1000}
	switch {
	case err != nil:
		s.Error, s.TooMany = err.Error(), errors.Is(err, client.ErrTooMany)
		return s
	case !inv.OK:
		s.Error = "function raised " + inv.Error.Type + ": " + inv.Error.Message
		return s
	case inv.Timing.Restore == nil:
		s.Error = "answer without restore timing (mode " + inv.Mode + ")"
		return s
	}
	t := inv.Timing.Restore
	s.VMM, s.TotalMS, s.SetupMS, s.ResumeMS, s.InvokeMS = t.VMM, inv.Timing.TotalMS, t.SetupMS, t.ResumeMS, inv.Timing.InvokeMS
	s.VMMStartMS, s.LoadStateMS, s.AdmissionWaitMS = t.VMMStartMS, t.LoadStateMS, t.AdmissionWaitMS
	if inv.Process != nil {
		q := inv.Process.CPUTotalMS
		if t.VMM == "pooled" {
			sb := t.StandbyCPUMS
			s.StandbyCPUMS = &sb
			q -= sb
		}
		s.QEMUCPUMS = &q
	}
	return s
}

func (r *restoreRun) add(s RestoreSample) {
	r.res.Samples = append(r.res.Samples, s)
	if r.cfg.Sink != nil {
		b, _ := json.Marshal(s)
		_, _ = r.cfg.Sink.Write(append(b, '\n'))
	}
	if s.Error != "" {
		r.say("%-4s %-8s N=%-2d rep %d slot %-2d: FAILED: %s", s.Pool, s.Strategy, s.Concurrency, s.Rep, s.Slot, termtext.Line(s.Error))
		return
	}
	r.say("%-4s %-8s N=%-2d rep %d slot %-2d: vmm %-7s setup %6.1f ms, resume %7.1f, total %7.1f; QEMU CPU %s, daemon CPU %s",
		s.Pool, s.Strategy, s.Concurrency, s.Rep, s.Slot, s.VMM, s.SetupMS, s.ResumeMS, s.TotalMS, fmtOpt(s.QEMUCPUMS), fmtOpt(s.DaemonCPUMS))
}

// fmtOpt prints a measured value or "unmeasured".
func fmtOpt(v *float64) string {
	if v == nil {
		return "unmeasured"
	}
	return fmt.Sprintf("%.0f ms", *v)
}
