// Package fresh measures ready clones the way a user sees them (thaw bench
// fresh): request-to-answer latency of a ready clone's hit beside a miss (a
// cold restore), keep-alive reuse and a warm call, at several
// concurrencies; the memory each ready clone holds; how fast they are
// refilled; and a trace-driven run's hit rate against the ready memory it
// spent. The daemon must keep ready clones (thawd --standby-memory).
package fresh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
)

// The modes measured, and the invocation mode each expects.
const (
	ModeHit  = "ready hit"
	ModeMiss = "ready miss (cold restore)"
	ModeKept = "keep-alive"
	ModeWarm = "warm"
)

// Modes in report order.
var Modes = []string{ModeHit, ModeMiss, ModeKept, ModeWarm}

var servedAs = map[string]string{ModeHit: "ready", ModeMiss: "cold", ModeKept: "pooled", ModeWarm: "warm"}

// ErrNoReady: the daemon kept no ready clone.
var ErrNoReady = errors.New("no ready clone appeared: start thawd with --standby-memory")

// Config is a run.
type Config struct {
	Cases       []bench.FunctionCase
	Concurrency []int // default 1, 4, 16
	Rounds      int   // bursts per mode and concurrency (default 5)
	Trace       TraceConfig
	// ReadyWait bounds the wait for a burst's ready clones (default 2 min).
	ReadyWait time.Duration
	Say       func(string, ...any)
	Sink      io.Writer // samples, a JSON line each, as they come
}

func (c *Config) defaults() {
	if len(c.Concurrency) == 0 {
		c.Concurrency = []int{1, 4, 16}
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.ReadyWait <= 0 {
		c.ReadyWait = 2 * time.Minute
	}
	if c.Say == nil {
		c.Say = func(string, ...any) {}
	}
}

// Sample is one request.
type Sample struct {
	Function    string  `json:"function"`
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	Round       int     `json:"round"`
	Served      string  `json:"served"` // the invocation's mode
	ClientMS    float64 `json:"client_ms"`
	TotalMS     float64 `json:"total_ms"`
	RenewMS     float64 `json:"renew_ms,omitempty"`
}

// Result is a run's samples and what they show.
type Result struct {
	Machine     bench.Machine `json:"machine"`
	When        time.Time     `json:"when"`
	Functions   []string      `json:"functions"`
	Concurrency []int         `json:"concurrency"`
	Rounds      int           `json:"rounds"`
	Samples     []Sample      `json:"samples"`
	Memory      []CloneMemory `json:"memory"`
	Refills     []Refill      `json:"refills"`
	Traces      []TraceResult `json:"traces,omitempty"`
	Rows        []Row         `json:"rows"`
}

// CloneMemory is what one ready clone's VMM process held, measured, and
// what the daemon counts it against --standby-memory.
type CloneMemory struct {
	Function string `json:"function"`
	VM       string `json:"vm"`
	GuestMiB int    `json:"guest_mib"`
	// CountedMiB is the daemon's own figure (the listing's
	// ready_memory_mib); 0: it gave none.
	CountedMiB int     `json:"counted_mib,omitempty"`
	RSSMiB     float64 `json:"rss_mib"`
	PSSMiB     float64 `json:"pss_mib"`
	AnonMiB    float64 `json:"anon_mib"`
}

// Refill is how long a function took to have Concurrency ready clones
// again after a burst of as many hits took them: from the burst's first
// take to a listing of that many ready clones, none of them one it took.
type Refill struct {
	Function    string  `json:"function"`
	Concurrency int     `json:"concurrency"`
	MS          float64 `json:"ms"`
}

// run is a run in progress.
type run struct {
	c   *client.Client
	cfg Config
	res *Result
	mu  sync.Mutex
}

// Run measures every case of cfg on the daemon c talks to.
func Run(ctx context.Context, c *client.Client, cfg Config) (*Result, error) {
	cfg.defaults()
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	r := &run{c: c, cfg: cfg,
		res: &Result{Machine: bench.DescribeMachine(info), When: time.Now().UTC(), Concurrency: cfg.Concurrency, Rounds: cfg.Rounds}}
	for _, fc := range cfg.Cases {
		r.res.Functions = append(r.res.Functions, fc.Name)
		if err := r.function(ctx, fc); err != nil {
			return nil, fmt.Errorf("%s: %w", fc.Name, err)
		}
	}
	r.res.Rows = Rows(r.res.Samples)
	return r.res, nil
}

// subject is a function under measurement.
type subject struct {
	fc    bench.FunctionCase
	name  string // the function's name on the daemon
	snap  string
	event json.RawMessage
}

// function measures one case: set up, every concurrency, the trace.
func (r *run) function(ctx context.Context, fc bench.FunctionCase) error {
	s, err := r.setUp(ctx, fc)
	if err != nil {
		return err
	}
	defer func() {
		_, _ = r.c.DeleteFunctionWith(context.WithoutCancel(ctx), s.name, client.DeleteFunctionOptions{Cascade: true})
	}()
	for _, n := range r.cfg.Concurrency {
		r.cfg.Say("%s: concurrency %d", fc.Name, n)
		if err := r.concurrency(ctx, s, n); err != nil {
			return err
		}
	}
	if r.cfg.Trace.Seconds > 0 {
		r.cfg.Say("%s: trace of %.0f s", fc.Name, r.cfg.Trace.Seconds)
		tr, err := r.trace(ctx, s)
		if err != nil {
			return err
		}
		r.res.Traces = append(r.res.Traces, *tr)
	}
	return nil
}

// setUp creates the case's function (afresh) and prepares it.
func (r *run) setUp(ctx context.Context, fc bench.FunctionCase) (*subject, error) {
	s := &subject{fc: fc, name: "fresh-" + fc.Name, event: fc.TestEvent}
	if _, err := r.c.DeleteFunctionWith(ctx, s.name, client.DeleteFunctionOptions{Cascade: true}); err != nil && !errors.Is(err, client.ErrNotFound) {
		return nil, err
	}
	var opts []client.FunctionOption
	if len(fc.Services) > 0 {
		opts = append(opts, client.WithServices(fc.Services...))
	}
	if _, err := r.c.CreateFunctionFromDir(ctx, s.name, fc.Dir, fc.MemoryMiB, 1, opts...); err != nil {
		return nil, err
	}
	// A prepared snapshot: under auto, a function restored without
	// artifacts would be prepared in the background midway, and its new
	// snapshot start without clones.
	pr, err := r.c.Prepare(ctx, s.name, fc.RecordEvent, client.PrepareOptions{})
	if err != nil {
		return nil, err
	}
	s.snap = pr.Warm.ID
	return s, nil
}

// concurrency measures every mode at n concurrent requests.
func (r *run) concurrency(ctx context.Context, s *subject, n int) error {
	if err := r.hits(ctx, s, n); err != nil {
		return err
	}
	if err := r.kept(ctx, s, n); err != nil {
		return err
	}
	for round := range r.cfg.Rounds {
		_, err := r.burst(ctx, s, ModeMiss, n, round, func(int) (*client.Invocation, error) {
			return r.c.InvokeSnapshot(ctx, s.snap, s.event, client.InvokeOptions{})
		})
		if err != nil {
			return err
		}
	}
	return r.warm(ctx, s, n)
}

// byName is the function's invocation that may take a ready clone.
func (r *run) byName(ctx context.Context, s *subject) func(int) (*client.Invocation, error) {
	return func(int) (*client.Invocation, error) {
		return r.c.InvokeFunction(ctx, s.name, s.event, client.InvokeOptions{})
	}
}

// sentCall is a request of a burst that was answered, and when it was sent.
type sentCall struct {
	at  time.Time
	inv *client.Invocation
}

// burst sends n requests at once, records each as a sample of mode and
// returns those answered.
func (r *run) burst(ctx context.Context, s *subject, mode string, n, round int, call func(i int) (*client.Invocation, error)) ([]sentCall, error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	calls := make([]sentCall, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			inv, err := call(i)
			took := time.Since(sent)
			if err == nil && !inv.OK {
				err = fmt.Errorf("invocation %s failed: %+v", inv.ID, inv.Error)
			}
			if err != nil {
				errs[i] = err
				return
			}
			calls[i] = sentCall{at: sent, inv: inv}
			r.add(sampleOf(s.fc.Name, mode, n, round, inv, took))
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(calls, func(c sentCall) bool { return c.inv == nil }), errors.Join(errs...)
}

func sampleOf(fn, mode string, n, round int, inv *client.Invocation, took time.Duration) Sample {
	sm := Sample{Function: fn, Mode: mode, Concurrency: n, Round: round, Served: inv.Mode,
		ClientMS: float64(took.Microseconds()) / 1000, TotalMS: inv.Timing.TotalMS}
	if inv.Timing.Ready != nil {
		sm.RenewMS = inv.Timing.Ready.RenewMS
	}
	return sm
}

func (r *run) add(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Samples = append(r.res.Samples, s)
	if r.cfg.Sink != nil {
		b, _ := json.Marshal(s)
		_, _ = r.cfg.Sink.Write(append(b, '\n'))
	}
}
